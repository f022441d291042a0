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
    /// `beacon` next to the test bundle (`.build/<triple>/debug/`), else under the package's
    /// `.build/debug`; `BEACON_TOOL` names another one, to run a suite against an older build
    /// (`BEACON_TOOL=/tmp/old/.build/debug/beacon swift test --skip-build --filter LinkCommandTests`
    /// shows which cases fail there).
    static let executable: String = {
        if let override = ProcessInfo.processInfo.environment["BEACON_TOOL"], !override.isEmpty { return override }
        let bundleDir = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
        var candidates = [bundleDir.appendingPathComponent("beacon").path]
        var dir = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
        while dir.path != "/" {
            if FileManager.default.fileExists(atPath: dir.appendingPathComponent("Package.swift").path) {
                candidates.append(dir.appendingPathComponent(".build/debug/beacon").path)
                break
            }
            dir = dir.deletingLastPathComponent()
        }
        return candidates.first { FileManager.default.isExecutableFile(atPath: $0) } ?? candidates.last!
    }()

    /// Runs `beacon ARGS`, feeding `stdin` through a pipe (written from another thread) and
    /// capturing stdout in a temporary file (or sending it to `stdoutFile`). `currentDirectory`
    /// is where relative paths resolve; `environment` entries are added to this process's. With
    /// `timeout`, a run still going after it is killed (SIGKILL; status 9 with reason
    /// uncaughtSignal): for cases an older build may hang in.
    static func run(_ arguments: [String], stdin: Data = Data(), stdoutFile: String? = nil, closedStdout: Bool = false, currentDirectory: String? = nil, environment: [String: String] = [:], timeout: Duration? = nil) throws -> ToolResult {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        if let currentDirectory { process.currentDirectoryURL = URL(fileURLWithPath: currentDirectory) }
        if !environment.isEmpty { process.environment = ProcessInfo.processInfo.environment.merging(environment) { $1 } }
        let input = Pipe()
        process.standardInput = input
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("beacon-cli-out-\(UUID().uuidString)").path
        defer {
            try? FileManager.default.removeItem(atPath: scratch + ".out")
            try? FileManager.default.removeItem(atPath: scratch + ".err")
        }
        let outPath = stdoutFile ?? scratch + ".out"
        _ = FileManager.default.createFile(atPath: outPath, contents: nil)
        _ = FileManager.default.createFile(atPath: scratch + ".err", contents: nil)
        let closedPipe = Pipe()
        if closedStdout {
            try closedPipe.fileHandleForReading.close()
            process.standardOutput = closedPipe
        } else {
            process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: outPath))
        }
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: scratch + ".err"))
        // The tool may exit before reading everything (usage errors, a bad directory): writing
        // then fails with EPIPE, which must not kill the test process with SIGPIPE.
        ignoreBrokenPipes()
        try process.run()
        let writer = Thread {
            let handle = input.fileHandleForWriting
            stdin.withUnsafeBytes { raw in
                var done = 0
                while done < raw.count {
                    let n = Glibc.write(handle.fileDescriptor, raw.baseAddress! + done, raw.count - done)
                    if n <= 0 { if n < 0 && errno == EINTR { continue }; break }
                    done += n
                }
            }
            try? handle.close()
        }
        writer.start()
        if let timeout {
            let pid = process.processIdentifier
            let deadline = ContinuousClock.now + timeout
            while process.isRunning && ContinuousClock.now < deadline { usleep(10_000) }
            if process.isRunning { kill(pid, SIGKILL) }
        }
        process.waitUntilExit()
        while !writer.isFinished { usleep(1000) }
        let out = closedStdout ? Data() : (fileContents(atPath: outPath) ?? Data())
        let err = String(decoding: fileContents(atPath: scratch + ".err") ?? Data(), as: UTF8.self)
        return ToolResult(status: process.terminationStatus, stdout: out, stderr: err)
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
    let process = Process()
    private let input = Pipe()
    private let errPath: String
    private let outPath: String

    /// Starts `beacon ARGS` (or another `executable`); stdout goes to `stdoutFile` (appended to)
    /// or a scratch file.
    init(_ arguments: [String], stdoutFile: String? = nil, executable: String = BeaconToolRunner.executable) throws {
        let scratch = FileManager.default.temporaryDirectory.appendingPathComponent("beacon-cli-bg-\(UUID().uuidString)").path
        errPath = scratch + ".err"
        outPath = stdoutFile ?? scratch + ".out"
        if !FileManager.default.fileExists(atPath: outPath) { _ = FileManager.default.createFile(atPath: outPath, contents: nil) }
        _ = FileManager.default.createFile(atPath: errPath, contents: nil)
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        process.standardInput = input
        let out = try FileHandle(forWritingTo: URL(fileURLWithPath: outPath))
        try out.seekToEnd()
        process.standardOutput = out
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: errPath))
        // The tool may exit (or be killed) before ``send(_:)`` writes: EPIPE, not SIGPIPE.
        ignoreBrokenPipes()
        try process.run()
    }

    var pid: Int32 { process.processIdentifier }

    /// Writes `lines` (each with a newline) to the tool's stdin.
    func send(_ lines: [String]) throws {
        try input.fileHandleForWriting.write(contentsOf: stdinData(lines))
    }

    /// Writes raw bytes to the tool's stdin.
    func sendRaw(_ data: Data) throws {
        try input.fileHandleForWriting.write(contentsOf: data)
    }

    /// Sends `signal` and waits for the exit, stdin still open.
    func signal(_ number: Int32) -> (status: Int32, stderr: String) {
        _ = Glibc.kill(process.processIdentifier, number)
        process.waitUntilExit()
        try? input.fileHandleForWriting.close()
        return (process.terminationStatus, String(decoding: fileContents(atPath: errPath) ?? Data(), as: UTF8.self))
    }

    /// Closes stdin and waits for the exit.
    func finish() throws -> (status: Int32, stderr: String) {
        try input.fileHandleForWriting.close()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: fileContents(atPath: errPath) ?? Data(), as: UTF8.self))
    }

    /// SIGKILL, then wait.
    func kill() {
        _ = Glibc.kill(process.processIdentifier, SIGKILL)
        process.waitUntilExit()
        try? input.fileHandleForWriting.close()
    }

    deinit {
        if process.isRunning { kill() }
        try? FileManager.default.removeItem(atPath: errPath)
    }
}
