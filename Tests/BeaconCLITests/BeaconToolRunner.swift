import Foundation
import Glibc
@_exported import BeaconTestSupport

/// What one run of the `beacon` executable did.
struct ToolResult {
    var status: Int32
    var stdout: Data
    var stderr: String
    var stdoutText: String { String(decoding: stdout, as: UTF8.self) }
    var stdoutLines: [String] { stdoutText.split(separator: "\n", omittingEmptySubsequences: false).dropLast().map(String.init) }
}

/// Runs the built `beacon` executable as a user would: arguments, standard input through a pipe,
/// standard output and error captured.
enum BeaconToolRunner {
    /// `beacon` of this build (``builtProduct(_:)``: beside the test runner); `BEACON_TOOL` names
    /// another one, to run a suite against an older build
    /// (`BEACON_TOOL=/tmp/old/.build/debug/beacon swift test --skip-build --filter LinkCommandTests`
    /// shows which cases fail there).
    static let executable: String = {
        if let override = ProcessInfo.processInfo.environment["BEACON_TOOL"], !override.isEmpty { return override }
        // Where it is missing, every run fails with "cannot start <this path>".
        return builtProductPath("beacon")
    }()

    /// Runs `beacon ARGS`, feeding `stdin` through a pipe (written from another thread) and
    /// capturing stdout in a temporary file (or sending it to `stdoutFile`). `currentDirectory`
    /// is where relative paths resolve; `environment` entries are added to this process's. With
    /// `timeout`, a run still going after it is killed (SIGKILL; status 9 with reason
    /// uncaughtSignal): for cases an older build may hang in.
    static func run(_ arguments: [String], stdin: Data = Data(), stdoutFile: String? = nil, closedStdout: Bool = false, currentDirectory: String? = nil, environment: [String: String] = [:], timeout: Duration? = nil) throws -> ToolResult {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("beacon-cli-out-\(UUID().uuidString)").path
        defer {
            try? FileManager.default.removeItem(atPath: scratch + ".out")
            try? FileManager.default.removeItem(atPath: scratch + ".err")
        }
        let outPath = stdoutFile ?? scratch + ".out"
        let process = try SpawnedProcess(executable, arguments, environment: environment, currentDirectory: currentDirectory,
                                         stdin: .pipe, stdout: closedStdout ? .closedPipe : .file(outPath), stderr: .file(scratch + ".err"))
        // The tool may exit before reading everything (usage errors, a bad directory): writing
        // then fails with EPIPE, which must not kill the test process with SIGPIPE.
        ignoreBrokenPipes()
        let writer = Thread {
            process.write(stdin)
            process.closeInput()
        }
        writer.start()
        let ending = timeout.map { process.wait(killingAfter: $0) } ?? process.wait()
        while !writer.isFinished { usleep(1000) }
        let out = closedStdout ? Data() : (fileContents(atPath: outPath) ?? Data())
        let err = String(decoding: fileContents(atPath: scratch + ".err") ?? Data(), as: UTF8.self)
        let status: Int32 = switch ending {
        case .exited(let status): status
        case .signalled(let signal): signal
        }
        return ToolResult(status: status, stdout: out, stderr: err)
    }
}

/// Small `Purchase` events like the benchmark's, `n` of them starting at `from`.
func events(_ n: Int, from: Int = 0) -> [String] {
    (from..<(from + n)).map { i in
        #"{"distinct_id":"user-\#(i % 1000)","event":"Purchase","time":\#(1_700_000_000_000 + i),"_track_id":\#(i),"properties":{"$lib":"Swift","price":9.99,"vip":true}}"#
    }
}

/// `lines` joined with newlines, with a final newline.
func stdinData(_ lines: [String]) -> Data {
    Data((lines.joined(separator: "\n") + "\n").utf8)
}

/// Parses `beacon status --json` output.
func statusJSON(_ dir: String) throws -> [String: Any] {
    let result = try BeaconToolRunner.run(["status", dir, "--json"])
    guard result.status == 0, let object = try JSONSerialization.jsonObject(with: result.stdout) as? [String: Any] else {
        throw CocoaError(.coderReadCorrupt, userInfo: [NSDebugDescriptionErrorKey: "status --json: \(result.status) \(result.stdoutText) \(result.stderr)"])
    }
    return object
}

/// A `beacon` process left running while the test does other things: its stdin stays open
/// until ``finish()``.
final class RunningTool {
    let process: SpawnedProcess
    private let errPath: String

    /// Starts `beacon ARGS` (or another `executable`); stdout goes to `stdoutFile` (appended to)
    /// or a scratch file.
    init(_ arguments: [String], stdoutFile: String? = nil, executable: String = BeaconToolRunner.executable) throws {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("beacon-cli-bg-\(UUID().uuidString)").path
        errPath = scratch + ".err"
        // The tool may exit (or be killed) before ``send(_:)`` writes: EPIPE, not SIGPIPE.
        ignoreBrokenPipes()
        process = try SpawnedProcess(executable, arguments, stdin: .pipe, stdout: .file(stdoutFile ?? scratch + ".out", append: true), stderr: .file(errPath))
    }

    var pid: Int32 { process.pid }

    /// Writes `lines` (each with a newline) to the tool's stdin.
    func send(_ lines: [String]) throws {
        try sendRaw(stdinData(lines))
    }

    /// Writes raw bytes to the tool's stdin.
    func sendRaw(_ data: Data) throws {
        guard process.write(data) else { throw ChildError("beacon \(pid) no longer reads its stdin") }
    }

    /// Sends `signal` and waits for the exit, stdin still open.
    func signal(_ number: Int32) -> (status: Int32, stderr: String) {
        process.signal(number)
        return ended()
    }

    /// Sends `signal` without waiting for the exit (``wait()`` waits).
    func post(_ number: Int32) {
        process.signal(number)
    }

    /// Whether the tool still runs.
    var isRunning: Bool { process.isRunning }

    /// Waits for the exit, stdin still open.
    func wait() -> (status: Int32, stderr: String) {
        ended()
    }

    /// What the tool has written to stderr so far.
    var stderrSoFar: String { String(decoding: fileContents(atPath: errPath) ?? Data(), as: UTF8.self) }

    /// Closes stdin and waits for the exit.
    func finish() throws -> (status: Int32, stderr: String) {
        process.closeInput()
        return ended()
    }

    /// SIGKILL, then wait.
    func kill() {
        process.signal(SIGKILL)
        process.wait()
        process.closeInput()
    }

    /// Waits for the exit: the status (the signal's number when one ended it) and stderr.
    private func ended() -> (status: Int32, stderr: String) {
        let status: Int32 = switch process.wait() {
        case .exited(let status): status
        case .signalled(let signal): signal
        }
        process.closeInput()
        return (status, String(decoding: fileContents(atPath: errPath) ?? Data(), as: UTF8.self))
    }

    deinit {
        if process.isRunning { kill() }
        try? FileManager.default.removeItem(atPath: errPath)
    }
}
