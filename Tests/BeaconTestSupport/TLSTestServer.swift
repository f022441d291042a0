import Foundation
import Glibc
import Synchronization

/// Certificates for TLS tests, made with the `openssl` command in a directory of their own: a CA
/// (`ca.pem`) and, signed by it, `good` (DNS localhost, IP 127.0.0.1), `wrong-host` (DNS
/// collector.example only), `expired` (valid in January 2020 only) and `client` (client
/// authentication); and `unknown-ca`, the same names as `good` signed by a CA nobody trusts. Each
/// NAME has `NAME.pem` and `NAME.key`.
public struct TestPKI: Sendable {
    public let directory: String

    public var caFile: String { directory + "/ca.pem" }
    public func certificate(_ name: String) -> String { directory + "/\(name).pem" }
    public func key(_ name: String) -> String { directory + "/\(name).key" }

    /// The `openssl` command, if installed.
    public static let openssl: String? = executable("openssl")

    /// Makes the certificates in a new temporary directory (a second or so).
    public init() throws {
        guard let openssl = Self.openssl else { throw TLSTestError("openssl is not installed") }
        directory = temporaryDirectoryPath()
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        func run(_ arguments: [String]) throws {
            try TLSTestServer.run(openssl, arguments, in: directory)
        }
        let key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
        for ca in ["ca", "other-ca"] {
            try run(["req", "-x509"] + key + ["-keyout", "\(ca).key", "-out", "\(ca).pem", "-days", "2", "-subj", "/CN=Beacon test \(ca)",
                     "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign"])
        }
        let leaves: [(name: String, ca: String, subject: String, extensions: String)] = [
            ("good", "ca", "/CN=localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth"),
            ("unknown-ca", "other-ca", "/CN=localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth"),
            ("wrong-host", "ca", "/CN=collector.example", "subjectAltName=DNS:collector.example\nextendedKeyUsage=serverAuth"),
            ("client", "ca", "/CN=beacon-client", "extendedKeyUsage=clientAuth"),
        ]
        for leaf in leaves {
            try leaf.extensions.write(toFile: "\(directory)/\(leaf.name).ext", atomically: true, encoding: .utf8)
            try run(["req"] + key + ["-keyout", "\(leaf.name).key", "-out", "\(leaf.name).csr", "-subj", leaf.subject])
            try run(["x509", "-req", "-in", "\(leaf.name).csr", "-CA", "\(leaf.ca).pem", "-CAkey", "\(leaf.ca).key", "-set_serial", "\(Int.random(in: 1000...999_999))",
                     "-out", "\(leaf.name).pem", "-days", "2", "-extfile", "\(leaf.name).ext"])
        }
        // Expired: `openssl ca` takes explicit dates (x509 -days cannot go back in time).
        let config = """
            [ca]
            default_ca = test
            [test]
            database = \(directory)/index.txt
            new_certs_dir = \(directory)
            serial = \(directory)/serial
            default_md = sha256
            policy = anything
            copy_extensions = copy
            unique_subject = no
            [anything]
            commonName = supplied
            """
        try config.write(toFile: "\(directory)/ca.cnf", atomically: true, encoding: .utf8)
        try "".write(toFile: "\(directory)/index.txt", atomically: true, encoding: .utf8)
        try "1000\n".write(toFile: "\(directory)/serial", atomically: true, encoding: .utf8)
        try run(["req"] + key + ["-keyout", "expired.key", "-out", "expired.csr", "-subj", "/CN=localhost", "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        try run(["ca", "-batch", "-config", "ca.cnf", "-cert", "ca.pem", "-keyfile", "ca.key", "-in", "expired.csr", "-out", "expired.pem",
                 "-startdate", "20200101000000Z", "-enddate", "20200102000000Z", "-notext"])
    }

    /// Made once per test process (the files stay until the temporary directory is cleaned).
    public static let shared: Result<TestPKI, TLSTestError> = Result { () throws(TLSTestError) in
        do { return try TestPKI() } catch let error as TLSTestError { throw error } catch { throw TLSTestError("\(error)") }
    }
}

/// A TLS test fixture could not be made.
public struct TLSTestError: Error, CustomStringConvertible, Sendable {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// nginx serving HTTPS on 127.0.0.1 from a private configuration in a temporary directory, one
/// free port per ``Site``, each answering `return 200` to any request; stopped by ``stop()``.
public final class TLSTestServer: @unchecked Sendable {
    /// What each port shows a client.
    public enum Site: String, CaseIterable, Sendable {
        /// `good`: signed by the test CA, for localhost and 127.0.0.1; the connection is closed after 2
        /// requests, so that a third reconnects (and resumes the session).
        case good
        /// Signed by a CA nobody trusts.
        case unknownCA
        /// For collector.example only.
        case wrongHost
        /// Expired in 2020.
        case expired
        /// TLS 1.0 only (at security level 0, which OpenSSL 3 needs for it).
        case tls10
        /// Asks for a client certificate signed by the test CA; answers 403 without one.
        case clientCertificate
        /// Requires a client certificate (`ssl_verify_client on`): without one nginx answers every
        /// request "400 No required SSL certificate was sent" (issue 26).
        case clientCertificateRequired
        /// Plain HTTP, no TLS.
        case plain
    }

    public let pki: TestPKI
    public let directory: String
    public let ports: [Site: UInt16]
    private let process: SpawnedProcess

    /// nginx, if installed.
    public static let nginx: String? = executable("nginx", extra: ["/usr/sbin", "/usr/local/sbin", "/usr/local/nginx/sbin"])

    /// Whether nginx and openssl are installed; when not, says so loudly on standard error once.
    public static let isAvailable: Bool = {
        if nginx != nil && TestPKI.openssl != nil { return true }
        FileHandle.standardError.write(Data("""

            ***************************************************************************
            *  SKIPPING the https tests against nginx: nginx or openssl is missing    *
            *  (apt-get install nginx openssl; .ci/run installs them when it can).    *
            ***************************************************************************

            """.utf8))
        return false
    }()

    public static let skipReason = "nginx or openssl is not installed (apt-get install nginx openssl): the https tests against nginx are SKIPPED"

    /// Starts nginx with the shared certificates; waits until every port accepts connections.
    public init() throws {
        guard let nginx = Self.nginx else { throw TLSTestError("nginx is not installed") }
        pki = try TestPKI.shared.get()
        directory = temporaryDirectoryPath()
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var lastError = TLSTestError("nginx did not start")
        for _ in 0..<3 {
            var ports: [Site: UInt16] = [:]
            for site in Site.allCases {
                var port = try freeLoopbackPort()
                while ports.values.contains(port) { port = try freeLoopbackPort() }
                ports[site] = port
            }
            try Self.config(pki, directory, ports).write(toFile: directory + "/nginx.conf", atomically: true, encoding: .utf8)
            switch try startLoopbackServer("nginx", nginx, ["-p", directory, "-c", directory + "/nginx.conf", "-e", directory + "/error.log"],
                                           ports: Array(ports.values), errorLog: directory + "/error.log") {
            case .success(let process):
                self.process = process
                self.ports = ports
                return
            case .failure(let error):
                lastError = error
            }
        }
        throw lastError
    }

    deinit { stop() }

    /// Stops nginx and removes its directory.
    public func stop() {
        process.signal(SIGTERM)
        process.wait(killingAfter: .seconds(30))
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// `https://HOST:PORT/events` of `site` (`http://` for ``Site/plain``).
    public func url(_ site: Site, host: String = "localhost") -> URL {
        URL(string: "\(site == .plain ? "http" : "https")://\(host):\(ports[site]!)/events")!
    }

    static func config(_ pki: TestPKI, _ directory: String, _ ports: [Site: UInt16]) -> String {
        func server(_ site: Site, _ certificate: String, _ extra: String = "") -> String {
            """
                server {
                    listen 127.0.0.1:\(ports[site]!) ssl;
                    ssl_certificate \(pki.certificate(certificate));
                    ssl_certificate_key \(pki.key(certificate));
                    \(extra)
                    location / { return 200 "ok\\n"; }
                }
            """
        }
        return nginxConfig(directory: directory, http: """
                client_max_body_size 16m;
                ssl_session_cache shared:beacon:1m;
            \(server(.good, "good", "keepalive_requests 2;"))
            \(server(.unknownCA, "unknown-ca"))
            \(server(.wrongHost, "wrong-host"))
            \(server(.expired, "expired"))
            \(server(.tls10, "good", "ssl_protocols TLSv1; ssl_ciphers DEFAULT@SECLEVEL=0;"))
                server {
                    listen 127.0.0.1:\(ports[.clientCertificate]!) ssl;
                    ssl_certificate \(pki.certificate("good"));
                    ssl_certificate_key \(pki.key("good"));
                    ssl_client_certificate \(pki.caFile);
                    ssl_verify_client optional;
                    location / {
                        if ($ssl_client_verify != SUCCESS) { return 403 "client certificate: $ssl_client_verify\\n"; }
                        return 200 "ok\\n";
                    }
                }
                server {
                    listen 127.0.0.1:\(ports[.clientCertificateRequired]!) ssl;
                    ssl_certificate \(pki.certificate("good"));
                    ssl_certificate_key \(pki.key("good"));
                    ssl_client_certificate \(pki.caFile);
                    ssl_verify_client on;
                    location / { return 200 "ok\\n"; }
                }
                server {
                    listen 127.0.0.1:\(ports[.plain]!);
                    location / { return 200 "ok\\n"; }
                }
            """)
    }

    /// Runs `executable` with `arguments` in `directory` and returns its output; throws with it
    /// when it fails.
    @discardableResult
    public static func run(_ executable: String, _ arguments: [String], in directory: String) throws -> String {
        let (ending, text) = try SpawnedProcess.run(executable, arguments, currentDirectory: directory)
        guard ending == .exited(0) else {
            throw TLSTestError("\(executable) \(arguments.joined(separator: " ")) failed (\(ending)): \(text)")
        }
        return text
    }
}

/// Starts `executable` with `arguments` (no standard streams) and waits up to 60 s until it
/// accepts connections on every one of `ports`. When it exits or does not accept in time, it is
/// killed and the failure quotes the last lines of `errorLog`.
func startLoopbackServer(_ name: String, _ executable: String, _ arguments: [String], ports: [UInt16], errorLog: String) throws -> Result<SpawnedProcess, TLSTestError> {
    let process = try SpawnedProcess(executable, arguments, stdin: .null, stdout: .null, stderr: .null)
    let deadline = ContinuousClock.now + .seconds(60)
    while process.isRunning, ContinuousClock.now < deadline, !ports.allSatisfy(loopbackAccepts) { usleep(5000) }
    if process.isRunning, ports.allSatisfy(loopbackAccepts) { return .success(process) }
    process.signal(SIGKILL)
    process.wait()
    let log = (try? String(contentsOfFile: errorLog, encoding: .utf8)) ?? ""
    return .failure(TLSTestError("\(name) did not start: \(log.split(separator: "\n").suffix(3).joined(separator: "; "))"))
}

/// A port of 127.0.0.1 free a moment ago (bound to port 0, read back, closed).
public func freeLoopbackPort() throws -> UInt16 {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw TLSTestError("socket: \(String(cString: strerror(errno)))") }
    defer { close(fd) }
    var address = loopbackAddress(0)
    let bound = withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    }
    guard bound == 0 else { throw TLSTestError("bind: \(String(cString: strerror(errno)))") }
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
    }
    return UInt16(bigEndian: address.sin_port)
}

/// Whether something accepts TCP connections on 127.0.0.1:`port`.
public func loopbackAccepts(_ port: UInt16) -> Bool {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { return false }
    defer { close(fd) }
    var address = loopbackAddress(port)
    return withUnsafePointer(to: &address) {
        $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
    } == 0
}

/// 127.0.0.1:`port`.
public func loopbackAddress(_ port: UInt16) -> sockaddr_in {
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = port.bigEndian
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    return address
}

/// An nginx configuration running in the foreground with one worker, every file (pid, logs,
/// temporary bodies) in `directory`, and `http` inside its `http` block.
public func nginxConfig(directory: String, http: String) -> String {
    """
    daemon off;
    worker_processes 1;
    pid \(directory)/nginx.pid;
    error_log \(directory)/error.log;
    events { worker_connections 64; }
    http {
        access_log off;
        client_body_temp_path \(directory)/body;
        proxy_temp_path \(directory)/proxy;
        fastcgi_temp_path \(directory)/fastcgi;
        uwsgi_temp_path \(directory)/uwsgi;
        scgi_temp_path \(directory)/scgi;
    \(http)
    }
    """
}

/// `name` on PATH or in `extra` directories, if executable.
func executable(_ name: String, extra: [String] = ["/usr/bin", "/usr/sbin"]) -> String? {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
    let directories = path.split(separator: ":").map(String.init) + extra
    return directories.map { "\($0)/\(name)" }.first { FileManager.default.isExecutableFile(atPath: $0) }
}

/// A port of 127.0.0.1 that refuses connections while this lives: a socket bound to it that never
/// listens (and without `SO_REUSEADDR`), so no other test's server can take the port meanwhile, as
/// one could take the port of a server that was stopped.
public final class RefusingPort: @unchecked Sendable {
    public let port: UInt16
    private let fd: Int32
    private let released = Atomic(false)

    /// Binds `port` of 127.0.0.1 (0: a free one); throws when it is taken.
    public init(port: UInt16 = 0) throws {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw TLSTestError("socket: \(String(cString: strerror(errno)))") }
        var address = loopbackAddress(port)
        let bound = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard bound == 0 else { close(fd); throw TLSTestError("bind: \(String(cString: strerror(errno)))") }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        self.port = UInt16(bigEndian: address.sin_port)
        self.fd = fd
    }

    /// `http://127.0.0.1:PORT/events`.
    public var url: URL { URL(string: "http://127.0.0.1:\(port)/events")! }

    /// Hands the bound socket over (to a server that listens on it: the port is never free in
    /// between, as it would be from a close to another bind); the caller closes it. Once only.
    public func takeSocket() -> Int32 {
        precondition(!released.exchange(true, ordering: .sequentiallyConsistent), "the socket of port \(port) was already taken")
        return fd
    }

    deinit {
        if !released.load(ordering: .sequentiallyConsistent) { close(fd) }
    }
}
