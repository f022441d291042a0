import Foundation
import Glibc

/// lighttpd on a free port of 127.0.0.1, from a private configuration in a temporary directory,
/// serving `/events.sh`: a CGI collector that appends each request body to `bodies` and each
/// request's `Idempotency-Key` to `keys`, then answers 200. lighttpd frames the CGI's answer
/// itself (chunked or with a length) and enforces its own limits, set per test: requests per
/// keep-alive connection, the idle keep-alive timeout, and the largest request body (413 from the
/// head alone). Stopped by ``stop()``.
public final class LighttpdServer: @unchecked Sendable {
    /// lighttpd's limits for one server.
    public struct Limits: Sendable {
        /// `server.max-keep-alive-requests`: lighttpd answers `Connection: close` to the request
        /// after this many (the 4th for 3) and closes the connection.
        public var keepAliveRequests = 100
        /// `server.max-keep-alive-idle`, seconds: an idle connection is closed after it.
        public var keepAliveIdleSeconds = 5
        /// `server.max-request-size`, KiB: a larger body is answered 413.
        public var maxRequestKiB = 2048
        public init() {}
    }

    public let directory: String
    public let port: UInt16
    private let process: SpawnedProcess

    /// lighttpd, if installed.
    public static let lighttpd: String? = executable("lighttpd", extra: ["/usr/sbin", "/usr/local/sbin"])

    /// Whether lighttpd (with mod_cgi) is installed; when not, says so loudly on standard error once.
    public static let isAvailable: Bool = {
        if lighttpd != nil { return true }
        FileHandle.standardError.write(Data("""

            ***************************************************************************
            *  SKIPPING the tests against lighttpd: lighttpd is missing               *
            *  (apt-get install lighttpd; .ci/run installs it when it can).           *
            ***************************************************************************

            """.utf8))
        return false
    }()

    public static let skipReason = "lighttpd is not installed (apt-get install lighttpd): the tests against lighttpd are SKIPPED"

    /// Starts lighttpd in the foreground; waits until it accepts connections.
    public init(_ limits: Limits = Limits()) throws {
        guard let lighttpd = Self.lighttpd else { throw TLSTestError("lighttpd is not installed") }
        directory = temporaryDirectoryPath()
        let fileManager = FileManager.default
        for sub in ["www", "upload"] {
            try fileManager.createDirectory(atPath: directory + "/" + sub, withIntermediateDirectories: true)
        }
        let script = """
            #!/bin/sh
            cat >> '\(directory)/bodies'
            printf '%s\\n' "$HTTP_IDEMPOTENCY_KEY" >> '\(directory)/keys'
            printf 'Status: 200\\r\\nContent-Type: text/plain\\r\\n\\r\\nok\\n'

            """
        try script.write(toFile: directory + "/www/events.sh", atomically: true, encoding: .utf8)
        var lastError = TLSTestError("lighttpd did not start")
        for _ in 0..<3 {
            let port = try freeLoopbackPort()
            let config = """
                server.document-root = "\(directory)/www"
                server.bind = "127.0.0.1"
                server.port = \(port)
                server.errorlog = "\(directory)/error.log"
                server.upload-dirs = ( "\(directory)/upload" )
                server.modules = ( "mod_cgi" )
                cgi.assign = ( ".sh" => "/bin/sh" )
                server.max-keep-alive-requests = \(limits.keepAliveRequests)
                server.max-keep-alive-idle = \(limits.keepAliveIdleSeconds)
                server.max-request-size = \(limits.maxRequestKiB)

                """
            try config.write(toFile: directory + "/lighttpd.conf", atomically: true, encoding: .utf8)
            switch try startLoopbackServer("lighttpd", lighttpd, ["-D", "-f", directory + "/lighttpd.conf"], ports: [port], errorLog: directory + "/error.log") {
            case .success(let process):
                self.process = process
                self.port = port
                return
            case .failure(let error):
                lastError = error
            }
        }
        throw lastError
    }

    deinit { stop() }

    /// Stops lighttpd (SIGTERM, SIGKILL after 30 s: ``SpawnedProcess`` starts it with no signal
    /// blocked, where Foundation's Process gave it the spawning thread's mask, which on a Dispatch
    /// worker blocks SIGTERM) and removes its directory.
    public func stop() {
        process.signal(SIGTERM)
        process.wait(killingAfter: .seconds(30))
        try? FileManager.default.removeItem(atPath: directory)
    }

    /// `http://127.0.0.1:PORT/events.sh`.
    public var url: URL { URL(string: "http://127.0.0.1:\(port)/events.sh")! }

    /// Every request body the CGI collector received, concatenated in arrival order.
    public var bodies: [UInt8] { Array((try? Data(contentsOf: URL(fileURLWithPath: directory + "/bodies"))) ?? Data()) }

    /// The `Idempotency-Key` of every request the CGI collector answered, in order.
    public var keys: [String] {
        let text = (try? String(contentsOfFile: directory + "/keys", encoding: .utf8)) ?? ""
        return text.split(separator: "\n").map(String.init)
    }
}
