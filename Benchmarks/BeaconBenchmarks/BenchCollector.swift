import BeaconTestSupport
import BeaconTesting
import Foundation
import Glibc

/// A collector on 127.0.0.1 in a child process, so that its CPU time is not the measured
/// process's: Beacon's `LoopbackCollector` (`beacon-bench --serve-collector loopback`), or nginx
/// answering `return 200` (`--serve-collector nginx DIR`) when nginx is installed, also over https
/// on a second port when the `openssl` command is there to make a throwaway certificate (`DIR/tls.pem`,
/// for 127.0.0.1, its own CA).
///
/// The child prints `ready <port> [<https port>]`, answers `stats` with `<accepted events> <body bytes>` (`-1 -1`
/// for nginx, which does not count), and exits when its standard input closes (stopping nginx
/// first), so it never outlives the benchmark.
final class BenchCollector {
    enum Kind: String {
        case loopback, nginx
    }

    let kind: Kind
    let port: UInt16
    /// nginx's https port, when it has one.
    let tlsPort: UInt16?
    /// The throwaway certificate nginx serves on ``tlsPort``, to trust (`--cacert`).
    let caFile: String
    private let child: ChildProcess

    /// Starts the collector of `kind`; nginx keeps its files in `directory`.
    init(_ kind: Kind, directory: String) throws {
        self.kind = kind
        child = try ChildProcess(benchArguments: ["--serve-collector", kind.rawValue, directory])
        let line = try child.readLine(timeout: 30)
        let ports = line.split(separator: " ").dropFirst().map { UInt16($0) }
        guard line.hasPrefix("ready "), let port = ports.first ?? nil else {
            child.stop()
            throw BenchFailure("the \(kind) collector did not start: \(line)")
        }
        self.port = port
        tlsPort = ports.dropFirst().first ?? nil
        caFile = directory + "/tls.pem"
    }

    deinit { child.stop() }

    var url: URL { URL(string: "http://127.0.0.1:\(port)/events")! }

    /// The https URL, when the collector has one.
    var httpsURL: URL? { tlsPort.map { URL(string: "https://127.0.0.1:\($0)/events")! } }

    /// Events the collector accepted and body bytes it received (nil for nginx).
    func stats() throws -> (events: Int, bodyBytes: Int)? {
        try child.send("stats")
        let parts = try child.readLine().split(separator: " ").compactMap { Int($0) }
        guard parts.count == 2 else { throw BenchFailure("the \(kind) collector answered stats with something else") }
        return parts[0] < 0 ? nil : (parts[0], parts[1])
    }

    /// Waits until the collector has accepted `count` events (at most `timeout` seconds), asking
    /// every 10 ms: each question wakes the collector and this process, which on 2 cores slows
    /// the upload being timed (every 1 ms cost it about a tenth).
    func waitForEvents(_ count: Int, timeout: Double = 120) throws {
        let end = now() + timeout
        while let (events, _) = try stats(), events < count {
            guard now() < end else { throw BenchFailure("the \(kind) collector accepted \(events) of \(count) events within \(timeout) s") }
            usleep(10_000)
        }
    }

    func stop() { child.stop() }

    /// Where nginx is, if installed.
    static var nginxPath: String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
        let candidates = path.split(separator: ":").map { "\($0)/nginx" } + ["/usr/sbin/nginx", "/usr/local/sbin/nginx", "/usr/local/nginx/sbin/nginx"]
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    // MARK: The child's side

    /// `--serve-collector KIND DIR`: serves until standard input closes. Never returns.
    static func serve(_ arguments: [String]) -> Never {
        guard arguments.count == 2, let kind = Kind(rawValue: arguments[0]) else {
            fail("--serve-collector takes loopback|nginx and a directory")
        }
        switch kind {
        case .loopback:
            let collector: LoopbackCollector
            do {
                collector = try LoopbackCollector()
            } catch {
                reply("error \(error)")
                exit(1)
            }
            collector.retainsBodies = false
            reply("ready \(collector.port)")
            while let line = readLine() {
                if line == "stats" { reply("\(collector.acceptedEventCount) \(collector.receivedBodyBytes)") }
            }
            collector.stop()
            exit(0)
        case .nginx:
            let nginx: SpawnedProcess
            let port: UInt16
            let tlsPort: UInt16?
            do {
                (nginx, port, tlsPort) = try startNginx(in: arguments[1])
            } catch {
                reply("error \(error)")
                exit(1)
            }
            reply("ready \(port)" + (tlsPort.map { " \($0)" } ?? ""))
            while let line = readLine() {
                if line == "stats" { reply("-1 -1") }
            }
            nginx.signal(SIGTERM)
            nginx.wait()
            exit(0)
        }
    }

    static func reply(_ line: String) {
        FileHandle.standardOutput.write(Data((line + "\n").utf8))
    }

    /// Starts nginx in the foreground with a private configuration in `directory`, on a free port
    /// of 127.0.0.1, answering 200 to everything, and over https on a second port when a throwaway
    /// certificate could be made; returns it and its ports once it accepts connections.
    static func startNginx(in directory: String) throws -> (SpawnedProcess, UInt16, UInt16?) {
        guard let binary = nginxPath else { throw BenchFailure("nginx is not installed") }
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        let tls = throwawayCertificate(in: directory)
        for _ in 0..<5 {
            let port = try freeLoopbackPort()
            var tlsPort = tls ? try freeLoopbackPort() : nil
            while tlsPort == port { tlsPort = try freeLoopbackPort() }
            let https = tlsPort.map { "server { listen 127.0.0.1:\($0) ssl; ssl_certificate \(directory)/tls.pem; ssl_certificate_key \(directory)/tls.key; location / { return 200; } }" } ?? ""
            let config = nginxConfig(directory: directory, http: """
                    client_max_body_size 64m;
                    keepalive_requests 10000000;
                    keepalive_timeout 120s;
                    server {
                        listen 127.0.0.1:\(port);
                        location / { return 200; }
                    }
                    \(https)
                """)
            try config.write(toFile: directory + "/nginx.conf", atomically: true, encoding: .utf8)
            let nginx: SpawnedProcess
            do {
                nginx = try SpawnedProcess(binary, ["-p", directory, "-c", directory + "/nginx.conf", "-e", directory + "/error.log"], stdout: .null)
            } catch {
                throw BenchFailure("\(error)")
            }
            // Ready when it accepts a connection; gone when the port was taken meanwhile.
            let end = now() + 10
            while now() < end, nginx.isRunning {
                if loopbackAccepts(port) && tlsPort.map(loopbackAccepts) != false { return (nginx, port, tlsPort) }
                usleep(5000)
            }
            nginx.signal(SIGKILL)
            nginx.wait()
        }
        let log = (try? String(contentsOfFile: directory + "/error.log", encoding: .utf8)) ?? ""
        throw BenchFailure("nginx did not start: \(log.split(separator: "\n").suffix(3).joined(separator: "; "))")
    }

    /// Makes `directory/tls.pem` and `tls.key` (self-signed, P-256, for 127.0.0.1) with the
    /// `openssl` command; false when it is not installed or fails.
    static func throwawayCertificate(in directory: String) -> Bool {
        let arguments = ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                         "-keyout", directory + "/tls.key", "-out", directory + "/tls.pem", "-days", "2",
                         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"]
        guard let openssl = try? SpawnedProcess("/usr/bin/env", arguments, stdout: .null, stderr: .null) else { return false }
        return openssl.wait() == .exited(0)
    }

    /// 127.0.0.1:`port` (the free port, the readiness check and the address are the test
    /// support's: `freeLoopbackPort`, `loopbackAccepts`).
    static func loopback(_ port: UInt16) -> sockaddr_in {
        loopbackAddress(port)
    }
}
