import Foundation
import Glibc

/// How a request reaches its collector: directly, or through the HTTP proxy that the environment
/// names, read the way curl reads it.
///
/// - The proxy of an `http://` URL is `http_proxy` (lowercase only: a CGI server sets
///   `HTTP_PROXY` from a request's `Proxy:` header), of an `https://` URL `https_proxy`, else
///   `HTTPS_PROXY`; without one, `all_proxy`, else `ALL_PROXY`. An empty variable counts as unset.
/// - `no_proxy` (else `NO_PROXY`) lists hosts reached directly, separated by commas: `*` alone
///   means every host; a name matches itself and every name under it (`example.com` and
///   `.example.com` both match `example.com` and `a.example.com`, not `badexample.com`); an IP
///   address matches itself, and `10.0.0.0/8` or `fd00::/8` match the addresses in the block;
///   `host:port` matches that port only. Case and a final dot do not matter.
/// - A proxy is written `host:port`, `http://host:port` or `http://user:password@host:port`; its
///   port is 1080 when none is given (as curl). The user info goes as `Proxy-Authorization:
///   Basic` and is never shown. Only `http://` proxies are spoken: `https://` and SOCKS proxies
///   give ``unsupported(_:)``.
///
/// `http://` requests then go to the proxy in absolute form (`POST http://host/path HTTP/1.1`);
/// `https://` requests go through a `CONNECT host:port` tunnel, with TLS to the collector inside.
///
/// ```swift
/// let route = ProxyRoute(for: url, environment: ProcessInfo.processInfo.environment)
/// ```
package enum ProxyRoute: Equatable, Sendable {
    /// Straight to the collector.
    case direct
    /// Through this proxy.
    case proxy(Proxy)
    /// The environment names a proxy Beacon's transport cannot speak: why, for people.
    case unsupported(String)

    /// An HTTP proxy from the environment.
    package struct Proxy: Equatable, Sendable, CustomStringConvertible {
        /// The proxy's host name or address (an IPv6 address without brackets).
        var host: String
        var port: UInt16
        /// `Basic …` from the proxy URL's user info, for `Proxy-Authorization`. Never shown.
        var authorization: String?
        /// The variable that named it (`https_proxy`...), for messages.
        var variable: String

        /// `http://***@host:port (https_proxy)`: where, without the credentials.
        package var description: String {
            let shown = host.contains(":") ? "[\(host)]" : host
            return "http://\(authorization == nil ? "" : "***@")\(shown):\(port) (from \(variable))"
        }
    }

    /// The route for `url` under `environment`.
    package init(for url: URL, environment: [String: String]) {
        let scheme = url.scheme?.lowercased() ?? ""
        guard let rawHost = url.host, !rawHost.isEmpty else {
            self = .direct
            return
        }
        let variables = scheme == "http" ? ["http_proxy"] : scheme == "https" ? ["https_proxy", "HTTPS_PROXY"] : []
        guard let (variable, value) = (variables + ["all_proxy", "ALL_PROXY"]).lazy.compactMap({ name in environment[name].flatMap { $0.isEmpty ? nil : (name, $0) } }).first else {
            self = .direct
            return
        }
        let port = UInt16(clamping: url.port ?? (scheme == "https" ? 443 : 80))
        if let exceptions = environment["no_proxy"].flatMap({ $0.isEmpty ? nil : $0 }) ?? environment["NO_PROXY"],
           Self.bypasses(host: rawHost, port: port, noProxy: exceptions) {
            self = .direct
            return
        }
        self = Self.proxy(value, variable: variable)
    }

    /// The proxy `value` names (a URL or `host:port`).
    static func proxy(_ value: String, variable: String) -> ProxyRoute {
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        let text = trimmed.contains("://") ? trimmed : "http://" + trimmed
        let scheme = text.prefix { $0 != ":" }.lowercased()
        guard scheme == "http" else {
            let kind = scheme.hasPrefix("socks") ? "a SOCKS proxy" : scheme == "https" ? "an https:// proxy (TLS to the proxy)" : "a '\(scheme)' proxy"
            return .unsupported("\(variable) names \(RedactedURL(text: text)), \(kind), which Beacon's transport does not speak: name an http:// proxy, list the collector in no_proxy, or use HTTPTransport (beacon send --transport urlsession)")
        }
        guard let url = URL(string: text), var host = url.host, !host.isEmpty, (url.port ?? 1080) > 0, (url.port ?? 1080) <= 65535 else {
            return .unsupported("\(variable) is not a proxy URL: '\(RedactedURL(text: text))'")
        }
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        return .proxy(Proxy(host: host, port: UInt16(url.port ?? 1080), authorization: SocketEndpoint.basicAuthorization(of: url), variable: variable))
    }

    // MARK: - no_proxy

    /// Whether `noProxy` lists `host` (as the URL writes it) at `port`.
    static func bypasses(host: String, port: UInt16, noProxy: String) -> Bool {
        let list = noProxy.trimmingCharacters(in: .whitespaces)
        if list == "*" { return true }
        let name = normalized(host)
        let address = IPAddress(name)
        for rawEntry in list.split(separator: ",") {
            var entry = normalized(rawEntry.trimmingCharacters(in: .whitespaces))
            guard !entry.isEmpty else { continue }
            // host:port (an IPv6 address only in brackets: [::1]:8080).
            if let (entryHost, entryPort) = splitPort(entry) {
                guard entryPort == port else { continue }
                entry = entryHost
            }
            if let address {
                if address.matches(entry) { return true }
                continue
            }
            if entry.hasPrefix(".") { entry.removeFirst() }
            if name == entry || name.hasSuffix("." + entry) { return true }
        }
        return false
    }

    /// Lowercased, without brackets or a final dot.
    private static func normalized(_ text: String) -> String {
        var s = text.lowercased()
        if s.hasPrefix("["), let close = s.firstIndex(of: "]"), s.index(after: close) == s.endIndex {
            s = String(s.dropFirst().dropLast())
        }
        if s.hasSuffix(".") { s.removeLast() }
        return s
    }

    /// `host:port` or `[v6]:port` split, nil when `entry` has no port (a bare IPv6 address has
    /// colons but no port).
    private static func splitPort(_ entry: String) -> (String, UInt16)? {
        if entry.hasPrefix("[") {
            guard let close = entry.firstIndex(of: "]"), entry[entry.index(after: close)...].hasPrefix(":"),
                  let port = UInt16(entry[entry.index(close, offsetBy: 2)...]) else { return nil }
            return (String(entry[entry.index(after: entry.startIndex)..<close]), port)
        }
        guard entry.filter({ $0 == ":" }).count == 1, let colon = entry.firstIndex(of: ":"),
              let port = UInt16(entry[entry.index(after: colon)...]) else { return nil }
        return (String(entry[..<colon]), port)
    }

    /// An IPv4 or IPv6 address as bytes, to compare with `no_proxy` entries and blocks.
    struct IPAddress: Equatable {
        var bytes: [UInt8]

        init?(_ text: String) {
            var v4 = in_addr()
            var v6 = in6_addr()
            if inet_pton(AF_INET, text, &v4) == 1 {
                bytes = withUnsafeBytes(of: v4) { Array($0) }
            } else if inet_pton(AF_INET6, text, &v6) == 1 {
                bytes = withUnsafeBytes(of: v6) { Array($0) }
            } else {
                return nil
            }
        }

        /// Whether `entry` is this address or a block (`address/bits`) holding it.
        func matches(_ entry: String) -> Bool {
            let parts = entry.split(separator: "/", maxSplits: 1).map(String.init)
            guard let network = IPAddress(parts[0]), network.bytes.count == bytes.count else { return false }
            let bits = parts.count == 2 ? Int(parts[1]) : bytes.count * 8
            guard let bits, (0...(bytes.count * 8)).contains(bits) else { return false }
            for i in 0..<bytes.count {
                let keep = max(0, min(8, bits - i * 8))
                let mask: UInt8 = keep == 0 ? 0 : ~UInt8(0) << (8 - keep)
                if bytes[i] & mask != network.bytes[i] & mask { return false }
            }
            return true
        }
    }
}
