import BeaconTestSupport
import Foundation
import Glibc
import Synchronization

/// A child process of the harness: `beacon append`, `beacon send`, `beacon status`, or this
/// executable as the tracker, started as a `SpawnedProcess` (as the tests and the benchmarks
/// start theirs). Its standard error goes to a log file of the run (appended), its standard input
/// is a pipe (``write(_:)``) or /dev/null, its standard output a pipe read line by line on a
/// thread of its own (`onLine`) or /dev/null.
final class ChaosChild: @unchecked Sendable {
    let pid: pid_t
    let name: String
    private let process: SpawnedProcess
    private var status: Int32?
    /// Set once its standard output reached end-of-file (every line it wrote was handled).
    private let outputDone = ChaosFlag()

    init(_ name: String, path: String, arguments: [String], stdinPipe: Bool = false,
         errorLog: String, onLine: (@Sendable (String) -> Void)? = nil) throws {
        self.name = name
        do {
            process = try SpawnedProcess(path, arguments, stdin: stdinPipe ? .pipe : .null, stdout: onLine == nil ? .null : .pipe,
                                         stderr: .file(errorLog, append: true))
        } catch {
            throw ChaosFailure("\(error)")
        }
        pid = process.pid
        ChildRegistry.add(pid)
        if let onLine {
            let process = self.process, outputDone = self.outputDone
            let thread = Thread {
                var buffered: [UInt8] = []
                var chunk = [UInt8](repeating: 0, count: 4096)
                while true {
                    let n = chunk.withUnsafeMutableBytes { read(process.output, $0.baseAddress, $0.count) }
                    if n < 0 && errno == EINTR { continue }
                    guard n > 0 else { break }
                    buffered += chunk[..<n]
                    while let newline = buffered.firstIndex(of: 0x0A) {
                        onLine(String(decoding: buffered[..<newline], as: UTF8.self))
                        buffered.removeSubrange(...newline)
                    }
                }
                outputDone.set()
            }
            thread.start()
        }
    }

    /// Writes `bytes` to the child's standard input; false when the child is gone.
    func write(_ bytes: [UInt8]) -> Bool { process.write(bytes) }

    func closeInput() { process.closeInput() }

    func signal(_ signal: Int32) { process.signal(signal) }

    /// Whether the child has a handler for `signal` (the `SigCgt` mask of `/proc/PID/status`).
    /// Until it has, the signal's default action ends it: the dynamic loader and the runtime's
    /// start-up take more than a second on a loaded machine, before any code of its own runs.
    func catches(_ signal: Int32) -> Bool {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = text.split(separator: "\n").first(where: { $0.hasPrefix("SigCgt:") }),
              let mask = UInt64(line.dropFirst("SigCgt:".count).trimmingCharacters(in: .whitespaces), radix: 16)
        else { return false }
        return mask & (1 << UInt64(signal - 1)) != 0
    }

    /// The wait status once the child ended (reaping it), nil while it runs.
    func poll() -> Int32? {
        if let status { return status }
        guard process.endingIfEnded != nil, let value = process.waitStatus else { return nil }
        status = value
        ChildRegistry.remove(pid)
        return value
    }

    /// Waits up to `timeout` seconds for the child to end; its wait status, nil if it still runs.
    func wait(timeout: Double) -> Int32? {
        let end = Date().addingTimeInterval(timeout)
        while Date() < end {
            if let status = poll() { return status }
            usleep(5000)
        }
        return poll()
    }

    /// Waits up to `timeout` seconds until every line the child wrote was handled (its output
    /// closed: it ended); whether it was.
    func waitForOutput(timeout: Double) -> Bool {
        let end = Date().addingTimeInterval(timeout)
        while !outputDone.isSet {
            guard Date() < end else { return false }
            usleep(2000)
        }
        return true
    }

    /// Kills the child (SIGKILL, after SIGCONT in case it is stopped) and reaps it.
    func killAndReap() -> Int32 {
        signal(SIGKILL)
        signal(SIGCONT)
        closeInput()
        while true {
            if let status = wait(timeout: 1) { return status }
        }
    }

    /// "exit 0", "signal 9 (Killed)"...
    static func describe(_ status: Int32) -> String {
        let signal = status & 0x7f
        if signal == 0 { return "exit \((status >> 8) & 0xff)" }
        return "signal \(signal) (\(String(cString: strsignal(signal))))\(status & 0x80 != 0 ? ", core dumped" : "")"
    }

    static func exitCode(_ status: Int32) -> Int32? { status & 0x7f == 0 ? (status >> 8) & 0xff : nil }
}

/// The pids of the children still running, so that an interrupted harness (Ctrl-C, `timeout`)
/// kills them instead of leaving them behind: a fixed table a signal handler can read.
enum ChildRegistry {
    static let capacity = 64
    nonisolated(unsafe) static let pids: UnsafeMutablePointer<pid_t> = {
        let table = UnsafeMutablePointer<pid_t>.allocate(capacity: capacity)
        table.initialize(repeating: 0, count: capacity)
        return table
    }()
    private static let lock = Mutex(())

    static func add(_ pid: pid_t) {
        lock.withLock { _ in
            for index in 0..<capacity where pids[index] == 0 {
                pids[index] = pid
                return
            }
        }
    }

    static func remove(_ pid: pid_t) {
        lock.withLock { _ in
            for index in 0..<capacity where pids[index] == pid { pids[index] = 0 }
        }
    }

    /// Kills every child still running (the harness is giving up).
    static func killAll() {
        lock.withLock { _ in
            for index in 0..<capacity where pids[index] > 0 {
                kill(pids[index], SIGCONT)
                kill(pids[index], SIGKILL)
            }
        }
    }

    /// SIGINT, SIGTERM and SIGHUP kill every child, then end the harness with 128 + the signal.
    static func installCleanup() {
        _ = pids
        for signo in [SIGINT, SIGTERM, SIGHUP] {
            signal(signo) { signo in
                for index in 0..<ChildRegistry.capacity where ChildRegistry.pids[index] > 0 {
                    kill(ChildRegistry.pids[index], SIGCONT)
                    kill(ChildRegistry.pids[index], SIGKILL)
                }
                _exit(128 + signo)
            }
        }
    }
}

/// A flag one thread sets and others read.
final class ChaosFlag: Sendable {
    private let value = Atomic<Bool>(false)
    func set() { value.store(true, ordering: .sequentiallyConsistent) }
    func clear() { value.store(false, ordering: .sequentiallyConsistent) }
    var isSet: Bool { value.load(ordering: .sequentiallyConsistent) }
}
