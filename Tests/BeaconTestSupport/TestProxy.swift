import Foundation
import Glibc
import Synchronization

/// A small HTTP proxy on 127.0.0.1 for tests, written here (no proxy server is installed): it
/// forwards absolute-form requests (`POST http://host:port/path HTTP/1.1`, each to a fresh
/// upstream connection, its answer, framed by `Content-Length`, relayed back) and opens `CONNECT`
/// tunnels (relaying bytes both ways until either side closes). With `credentials` it answers 407
/// to any request without `Proxy-Authorization: Basic base64(credentials)`. Every upstream is
/// reached on 127.0.0.1 whatever host the request names (`localhost`, `collector.test`...), so
/// tests can use names that resolve nowhere. It records what it was asked.
public final class TestProxy: Sendable {
    /// One request the proxy read: its method, target and `Proxy-Authorization` value.
    public struct Seen: Sendable, Equatable {
        public var method: String
        public var target: String
        public var proxyAuthorization: String?
        /// The request's head as the upstream got it (absolute-form requests only).
        public var forwardedHead: String?
    }

    private let server: ScriptedServer
    private final class Journal: Sendable {
        let seen = Mutex<[Seen]>([])
        func add(_ request: Seen) { seen.withLock { $0.append(request) } }
    }

    private let journal = Journal()
    public var port: UInt16 { server.port }
    public var requests: [Seen] { journal.seen.withLock { $0 } }

    /// `http://[user:password@]127.0.0.1:PORT`, for `http_proxy` and friends.
    public func url(credentials: String? = nil) -> String {
        "http://\(credentials.map { $0 + "@" } ?? "")127.0.0.1:\(port)"
    }

    public init(credentials: String? = nil) throws {
        let expected = credentials.map { "Basic " + Data($0.utf8).base64EncodedString() }
        let journal = self.journal
        server = try ScriptedServer { connection, _ in
            while let head = connection.readHead() {
                let lines = head.split(separator: "\r\n", omittingEmptySubsequences: false)
                let parts = lines.first?.split(separator: " ") ?? []
                guard parts.count == 3 else { return }
                let method = String(parts[0]), target = String(parts[1])
                var authorization: String?
                var length = 0
                var kept: [Substring] = []
                for line in lines.dropFirst() where !line.isEmpty {
                    let lower = line.lowercased()
                    if lower.hasPrefix("proxy-authorization:") {
                        authorization = line.dropFirst("proxy-authorization:".count).trimmingCharacters(in: .whitespaces)
                        continue
                    }
                    if lower.hasPrefix("content-length:") { length = Int(line.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) ?? 0 }
                    if lower.hasPrefix("connection:") { continue }
                    kept.append(line)
                }
                let body = length > 0 ? connection.readBytes(length) : []
                guard body.count == length else { return }
                if let expected, authorization != expected {
                    journal.add(Seen(method: method, target: target, proxyAuthorization: authorization))
                    connection.answer(407, "proxy credentials, please", headers: "Proxy-Authenticate: Basic realm=\"test\"\r\n")
                    continue
                }
                if method == "CONNECT" {
                    journal.add(Seen(method: method, target: target, proxyAuthorization: authorization))
                    guard let upstream = Self.connectUpstream(target) else {
                        connection.answer(502, "cannot reach \(target)")
                        continue
                    }
                    connection.write("HTTP/1.1 200 Connection established\r\n\r\n")
                    connection.relay(with: upstream)
                    return
                }
                // Absolute form: http://authority/path → origin form to the upstream.
                guard target.hasPrefix("http://") else {
                    connection.answer(400, "not a proxy request: \(target)")
                    continue
                }
                let rest = target.dropFirst("http://".count)
                let authority = rest.prefix { $0 != "/" && $0 != "?" }
                var path = String(rest.dropFirst(authority.count))
                if path.isEmpty || path.first == "?" { path = "/" + path }
                let forwarded = "\(method) \(path) HTTP/1.1\r\n" + kept.map { $0 + "\r\n" }.joined() + "Connection: close\r\n\r\n"
                journal.add(Seen(method: method, target: target, proxyAuthorization: authorization, forwardedHead: forwarded))
                let port = authority.split(separator: ":").last.flatMap { UInt16($0) } ?? 80
                guard let upstream = Self.connectUpstream("127.0.0.1:\(port)") else {
                    connection.answer(502, "cannot reach \(authority)")
                    continue
                }
                upstream.write(Array(forwarded.utf8) + body)
                // The answer (a head and a Content-Length body), relayed; then the upstream is closed.
                guard let answerHead = upstream.readHead() else {
                    connection.answer(502, "no answer from \(authority)")
                    upstream.close()
                    continue
                }
                let answerLength = answerHead.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
                    .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? 0
                connection.write(Array(answerHead.utf8) + upstream.readBytes(answerLength))
                upstream.close()
            }
        }
    }

    public func stop() { server.stop() }

    /// A connection to 127.0.0.1 at the port of `authority` (`host:port` or `[v6]:port`).
    static func connectUpstream(_ authority: String) -> ScriptedConnection? {
        guard let port = authority.split(separator: ":").last.flatMap({ UInt16($0) }) else { return nil }
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } } == 0
        guard connected else {
            close(fd)
            return nil
        }
        return ScriptedConnection(connectedFD: fd)
    }
}
