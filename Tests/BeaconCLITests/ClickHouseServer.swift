import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
#endif
import Glibc
import Testing

/// A private ClickHouse server for the tests: its own config, users and data under a temporary
/// directory, HTTP, native TCP and interserver ports all on 127.0.0.1 (free ports picked at
/// start), run as the current user. Never touches the system service or its directories.
///
/// ```swift
/// let server = try ClickHouseServer()      // starts it and waits for /ping
/// defer { server.stop() }
/// try server.query("SELECT 1")
/// ```
final class ClickHouseServer: @unchecked Sendable {
    /// The server executable: `$BEACON_CLICKHOUSE_SERVER` when set, else `clickhouse-server` (Debian's
    /// package puts it in /usr/sbin, which is not on every PATH), else `clickhouse` (run as
    /// `clickhouse server`); nil when none is installed.
    static let executable: (path: String, arguments: [String])? = {
        let environment = ProcessInfo.processInfo.environment
        if let path = environment["BEACON_CLICKHOUSE_SERVER"] {
            // Set, it is the only candidate (an empty or missing path turns the suite off).
            return FileManager.default.isExecutableFile(atPath: path) ? (path, []) : nil
        }
        let directories = (environment["PATH"] ?? "").split(separator: ":").map(String.init) + ["/usr/sbin", "/usr/bin", "/usr/local/bin", "/usr/local/sbin"]
        for directory in directories {
            let path = directory + "/clickhouse-server"
            if FileManager.default.isExecutableFile(atPath: path) { return (path, []) }
        }
        for directory in directories {
            let path = directory + "/clickhouse"
            if FileManager.default.isExecutableFile(atPath: path) { return (path, ["server"]) }
        }
        return nil
    }()

    /// Whether the suites can run; when not, says so loudly on standard error once.
    static let isAvailable: Bool = {
        if executable != nil { return true }
        FileHandle.standardError.write(Data("""

            ***************************************************************************
            *  SKIPPING the ClickHouse integration tests: no clickhouse-server found   *
            *  (looked in $BEACON_CLICKHOUSE_SERVER, PATH, /usr/sbin, /usr/bin).       *
            *  Install it with: apt-get install clickhouse-server                      *
            ***************************************************************************

            """.utf8))
        return false
    }()

    static let skipReason: Comment = "clickhouse-server is not installed (apt-get install clickhouse-server, or set BEACON_CLICKHOUSE_SERVER): the ClickHouse integration tests are SKIPPED"

    let root: String
    private(set) var httpPort = 0
    private(set) var tcpPort = 0
    private(set) var interserverPort = 0
    private var process: SpawnedProcess?

    /// Creates a private directory and config and starts the server.
    init() throws {
        root = FileManager.default.temporaryDirectory.appendingPathComponent("beacon-clickhouse-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        // Free ports are picked by binding port 0; another process can take one between the
        // pick and the server's bind, so a failed start is retried with new ports.
        var lastError: Error?
        for _ in 0..<3 {
            var ports: [Int] = []
            while ports.count < 3 { let port = freePort(); if !ports.contains(port) { ports.append(port) } }
            (httpPort, tcpPort, interserverPort) = (ports[0], ports[1], ports[2])
            try writeConfig()
            do {
                try start()
                return
            } catch {
                lastError = error
                kill()
            }
        }
        Self.removeTree(root)
        throw lastError!
    }

    deinit {
        stop()
    }

    /// The HTTP interface, `http://127.0.0.1:PORT/`.
    var baseURL: URL { URL(string: "http://127.0.0.1:\(httpPort)/")! }

    /// The URL that inserts POSTed JSON lines into `table`: `INSERT INTO table FORMAT JSONEachRow`,
    /// nested `properties` objects into `properties.*` columns, unknown fields ignored.
    func insertURL(table: String, skipUnknownFields: Bool = true) -> URL {
        var components = URLComponents(url: baseURL, resolvingAgainstBaseURL: false)!
        components.queryItems = [
            URLQueryItem(name: "query", value: "INSERT INTO \(table) FORMAT JSONEachRow"),
            URLQueryItem(name: "input_format_import_nested_json", value: "1"),
            URLQueryItem(name: "input_format_skip_unknown_fields", value: skipUnknownFields ? "1" : "0"),
        ]
        return components.url!
    }

    /// Starts the server on the current directory and ports and waits until `/ping` answers.
    func start() throws {
        guard process == nil else { return }
        guard let executable = Self.executable else { throw ServerError("clickhouse-server is not installed") }
        // SpawnedProcess, not Foundation's Process: Process watches a socket its child inherits and
        // then waits for that child with a blocking waitpid; ClickHouse closes inherited
        // descriptors at start, which leaves Process's monitor blocked for the server's whole
        // life and every other Process in the test run unreaped.
        process = try SpawnedProcess(executable.path, executable.arguments + ["--config-file=\(root)/config.xml"],
                                     stdin: .null, stdout: .file("\(root)/stdout.log", append: true), stderr: .stdout)
        let deadline = ContinuousClock.now + .seconds(60)
        while ContinuousClock.now < deadline {
            if let status = exitStatus() {
                throw ServerError("clickhouse-server \(status) while starting; its log:\n\(logTail())")
            }
            if (try? request(path: "ping", body: nil, timeout: 1))?.status == 200 {
                // Background merges are off in the config, so every insert stays one part whose
                // block number gives the arrival order; stop them here too, for older servers.
                _ = try? query("SYSTEM STOP MERGES")
                return
            }
            usleep(20_000)
        }
        throw ServerError("clickhouse-server did not answer /ping on 127.0.0.1:\(httpPort) within 60 s; its log:\n\(logTail())")
    }

    /// How the server ended, once it has (and was reaped); nil while it runs.
    private func exitStatus() -> SpawnedProcess.Ending? {
        guard let ended = process?.endingIfEnded else { return nil }
        process = nil
        return ended
    }

    /// Kills the server with SIGKILL (no shutdown at all) and waits for it to exit.
    func kill() {
        guard let child = process else { return }
        process = nil
        child.signal(SIGKILL)
        child.wait()
    }

    /// Stops the server (SIGTERM, then SIGKILL after 15 s) and removes its directory.
    func stop() {
        if let child = process {
            process = nil
            child.signal(SIGTERM)
            child.wait(killingAfter: .seconds(15))
        }
        Self.removeTree(root)
    }

    /// Removes `path` and everything under it with `rm -rf` (a server's data directory holds
    /// thousands of small files; FileManager takes seconds for them).
    static func removeTree(_ path: String) {
        guard FileManager.default.fileExists(atPath: path) else { return }
        _ = try? SpawnedProcess.run("/bin/rm", ["-rf", "--", path])
        if FileManager.default.fileExists(atPath: path) { try? FileManager.default.removeItem(atPath: path) }
    }

    /// Runs `sql` over HTTP and returns the answer's text; throws with the server's message on a
    /// non-200 answer.
    @discardableResult
    func query(_ sql: String) throws -> String {
        let answer = try request(path: "", body: Data(sql.utf8), timeout: 30)
        guard answer.status == 200 else { throw ServerError("ClickHouse answered \(answer.status) to \(sql.prefix(200)): \(answer.text)") }
        return answer.text
    }

    /// The rows of `sql` in TabSeparated format, each split into its fields.
    func rows(_ sql: String) throws -> [[String]] {
        try query(sql + " FORMAT TabSeparated").split(separator: "\n").map { $0.split(separator: "\t", omittingEmptySubsequences: false).map(String.init) }
    }

    /// POSTs `body` to the server (GET without one) and returns the status and text.
    func request(path: String, body: Data?, headers: [String: String] = [:], query items: [URLQueryItem] = [], timeout: Double) throws -> (status: Int, text: String) {
        var components = URLComponents(url: baseURL.appendingPathComponent(path), resolvingAgainstBaseURL: false)!
        if !items.isEmpty { components.queryItems = items }
        var request = URLRequest(url: components.url!, timeoutInterval: timeout)
        if let body {
            request.httpMethod = "POST"
            request.httpBody = body
        }
        for (name, value) in headers { request.setValue(value, forHTTPHeaderField: name) }
        // A new connection for every request: a kept-alive one may lead to a server the tests
        // killed and restarted since, and a POST written into it fails with "Broken pipe" (CI saw
        // that on the CREATE TABLE after the SIGKILL test).
        request.setValue("close", forHTTPHeaderField: "Connection")
        return try Self.send(request)
    }

    private static let session = URLSession(configuration: .ephemeral)

    private static func send(_ request: URLRequest) throws -> (status: Int, text: String) {
        final class Box: @unchecked Sendable { var result: Result<(Int, String), Error>? }
        let box = Box()
        let done = DispatchSemaphore(value: 0)
        session.dataTask(with: request) { data, response, error in
            if let error {
                box.result = .failure(error)
            } else {
                box.result = .success(((response as? HTTPURLResponse)?.statusCode ?? 0, String(decoding: data ?? Data(), as: UTF8.self)))
            }
            done.signal()
        }.resume()
        done.wait()
        return try box.result!.get()
    }

    /// The last lines of the server's logs, for error messages.
    func logTail() -> String {
        ["stdout.log", "log/server.err.log"].map { name in
            let text = (try? String(contentsOfFile: "\(root)/\(name)", encoding: .utf8)) ?? ""
            return "--- \(name):\n" + text.split(separator: "\n").suffix(15).joined(separator: "\n")
        }.joined(separator: "\n")
    }

    private func writeConfig() throws {
        for directory in ["data", "tmp", "user_files", "format_schemas", "log"] {
            try FileManager.default.createDirectory(atPath: "\(root)/\(directory)", withIntermediateDirectories: true)
        }
        try Self.config(root: root, httpPort: httpPort, tcpPort: tcpPort, interserverPort: interserverPort)
            .write(toFile: "\(root)/config.xml", atomically: true, encoding: .utf8)
        try Self.users.write(toFile: "\(root)/users.xml", atomically: true, encoding: .utf8)
    }

    /// A minimal server config: loopback only, every path under `root`, background merges off
    /// (parts stay one per insert, in arrival order) and no insert delayed or refused for having
    /// many parts, small caches, idle connections closed after 1 s (shutdown waits for them).
    static func config(root: String, httpPort: Int, tcpPort: Int, interserverPort: Int) -> String {
        """
        <?xml version="1.0"?>
        <yandex>
            <logger>
                <level>warning</level>
                <log>\(root)/log/server.log</log>
                <errorlog>\(root)/log/server.err.log</errorlog>
                <size>10M</size>
                <count>1</count>
            </logger>
            <listen_host>127.0.0.1</listen_host>
            <http_port>\(httpPort)</http_port>
            <tcp_port>\(tcpPort)</tcp_port>
            <interserver_http_port>\(interserverPort)</interserver_http_port>
            <interserver_http_host>127.0.0.1</interserver_http_host>
            <path>\(root)/data/</path>
            <tmp_path>\(root)/tmp/</tmp_path>
            <user_files_path>\(root)/user_files/</user_files_path>
            <format_schema_path>\(root)/format_schemas/</format_schema_path>
            <users_config>\(root)/users.xml</users_config>
            <default_profile>default</default_profile>
            <default_database>default</default_database>
            <mark_cache_size>67108864</mark_cache_size>
            <uncompressed_cache_size>67108864</uncompressed_cache_size>
            <mlock_executable>false</mlock_executable>
            <keep_alive_timeout>1</keep_alive_timeout>
            <merge_tree>
                <max_bytes_to_merge_at_max_space_in_pool>1</max_bytes_to_merge_at_max_space_in_pool>
                <parts_to_delay_insert>1000000</parts_to_delay_insert>
                <parts_to_throw_insert>1000000</parts_to_throw_insert>
            </merge_tree>
        </yandex>
        """
    }

    /// One user, `default`, without a password, from 127.0.0.1 only.
    static let users = """
        <?xml version="1.0"?>
        <yandex>
            <profiles><default></default></profiles>
            <users>
                <default>
                    <password></password>
                    <networks><ip>127.0.0.1</ip></networks>
                    <profile>default</profile>
                    <quota>default</quota>
                </default>
            </users>
            <quotas><default></default></quotas>
        </yandex>
        """
}

struct ServerError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// Starts one private ClickHouse server for a whole suite and stops it when the suite ends,
/// whether its tests passed, failed or threw. Tests reach it through ``ClickHouseServer/current``.
struct SharedClickHouse: SuiteTrait, TestScoping {
    var isRecursive: Bool { false }

    func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        guard ClickHouseServer.isAvailable else {
            try await function()
            return
        }
        // Starting the server waits for it (seconds): on a thread of its own, so that the wait
        // holds none of the concurrency pool's threads (on 2 cores, two such waits stalled every
        // other test of the run for 20 s).
        let server = try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<ClickHouseServer, any Error>) in
            Thread { continuation.resume(with: Result { try ClickHouseServer() }) }.start()
        }
        defer { server.stop() }
        try await ClickHouseServer.$current.withValue(server) {
            try await function()
        }
    }
}

extension Trait where Self == SharedClickHouse {
    /// One private ClickHouse server shared by the suite's tests (see ``SharedClickHouse``).
    static var sharedClickHouse: SharedClickHouse { SharedClickHouse() }
}

extension ClickHouseServer {
    /// The suite's server, set by ``SharedClickHouse``.
    @TaskLocal static var current: ClickHouseServer?

    /// The suite's server, or a failure naming the missing trait.
    static func shared() throws -> ClickHouseServer {
        try #require(current, "the suite needs the .sharedClickHouse trait")
    }
}
