import Foundation
import Glibc
import Synchronization

/// A child process started with `posix_spawn`: the one way tests, `beacon-bench` and
/// `beacon-chaos` start children (the test child, the `beacon` tool, the benchmark's own
/// collector process, servers such as nginx and Prometheus, `openssl`).
///
/// Not Foundation's `Process`, which has crashed test runs under load: its `run` reads past
/// `readdir`'s buffer while it looks for the highest open descriptor (a heap-buffer-overflow that
/// AddressSanitizer reports, and a SIGSEGV when the read crosses into an unmapped page), and its
/// one monitor thread for every child blocks in `waitpid` behind a child that closed the socket
/// it watches (ClickHouse), leaving the other children unreaped. Here the child gets only its
/// three standard streams (every other descriptor is closed in it), no blocked signal and every
/// signal at its default action (the test process ignores SIGPIPE), and is reaped by whoever
/// waits for it.
///
/// ```swift
/// let child = try SpawnedProcess(path, ["log", dir, "every", "10"], stdout: .pipe)
/// let ending = child.wait()
/// ```
public final class SpawnedProcess: Sendable {
    /// Where one of the child's standard streams goes.
    public enum Stream: Sendable {
        /// This process's own stream.
        case inherit
        /// `/dev/null`.
        case null
        /// A file: for stdout and stderr created if absent (mode 0600), written from its start or
        /// appended to; for stdin read from its start.
        case file(String, append: Bool = false)
        /// A pipe to this process: ``input`` for the child's stdin, ``output`` for its stdout.
        case pipe
        /// Standard output only: a pipe nobody reads (its read end closed), so that writes fail
        /// with EPIPE.
        case closedPipe
        /// Standard error only: where standard output goes.
        case stdout
    }

    /// How the child ended.
    public enum Ending: Equatable, Sendable, CustomStringConvertible {
        /// `exit(status)`.
        case exited(Int32)
        /// Killed by `signal`.
        case signalled(Int32)

        public var description: String {
            switch self {
            case .exited(let status): "exited with status \(status)"
            case .signalled(let signal): "killed by signal \(signal)"
            }
        }
    }

    /// The child's process id.
    public let pid: pid_t
    /// The write end of the child's stdin with `stdin: .pipe` (this process owns it; -1 otherwise).
    public let input: Int32
    /// The read end of the child's stdout with `stdout: .pipe` (this process owns it; -1 otherwise).
    public let output: Int32
    private let ending = Mutex<Reaped?>(nil)
    private let inputOpen = Atomic(true)

    /// Starts `executable` (a path) with `arguments`; `environment` entries are added to this
    /// process's, `currentDirectory` is where the child starts.
    public init(_ executable: String, _ arguments: [String], environment: [String: String] = [:], currentDirectory: String? = nil,
                stdin: Stream = .null, stdout: Stream = .inherit, stderr: Stream = .inherit) throws {
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        var toClose: [Int32] = []  // this process's ends of pipes that only the child keeps
        defer { toClose.forEach { close($0) } }
        var ours: [Int32] = []  // this process's ends, closed if the spawn fails
        var input: Int32 = -1, output: Int32 = -1
        for (fd, stream) in [(Int32(0), stdin), (1, stdout), (2, stderr)] {
            switch stream {
            case .inherit:
                break
            case .null:
                posix_spawn_file_actions_addopen(&actions, fd, "/dev/null", fd == 0 ? O_RDONLY : O_WRONLY, 0)
            case .file(let path, _) where fd == 0:
                posix_spawn_file_actions_addopen(&actions, fd, path, O_RDONLY, 0)
            case .file(let path, let append):
                posix_spawn_file_actions_addopen(&actions, fd, path, O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC), 0o600)
            case .stdout:
                precondition(fd == 2, "only stderr can go where stdout goes")
                posix_spawn_file_actions_adddup2(&actions, 1, 2)
            case .closedPipe:
                precondition(fd == 1, "only stdout can be a closed pipe")
                var ends: [Int32] = [-1, -1]
                try Self.closeOnExecPipe(&ends)
                posix_spawn_file_actions_adddup2(&actions, ends[1], fd)
                close(ends[0])
                toClose.append(ends[1])
            case .pipe:
                precondition(fd < 2, "stderr is never a pipe here: send it to a file, or to stdout")
                var ends: [Int32] = [-1, -1]
                try Self.closeOnExecPipe(&ends)
                let childEnd = fd == 0 ? ends[0] : ends[1], ourEnd = fd == 0 ? ends[1] : ends[0]
                posix_spawn_file_actions_adddup2(&actions, childEnd, fd)  // dup2 clears close-on-exec
                toClose.append(childEnd)
                ours.append(ourEnd)
                if fd == 0 { input = ourEnd } else { output = ourEnd }
            }
        }
        // Nothing else of this process: an inherited pipe end held open by the child would keep
        // another child's output (or a tool's stdin) from ever reaching its end. glibc 2.34's
        // posix_spawn_file_actions_addclosefrom_np and 2.29's addchdir_np are looked up by name:
        // Swift's Glibc module does not import them.
        if let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addclosefrom_np") {
            typealias CloseFrom = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, Int32) -> Int32
            _ = unsafeBitCast(symbol, to: CloseFrom.self)(&actions, 3)
        }
        if let currentDirectory {
            guard let symbol = dlsym(UnsafeMutableRawPointer(bitPattern: 0), "posix_spawn_file_actions_addchdir_np") else {
                ours.forEach { close($0) }
                throw ChildError("cannot start \(executable) in \(currentDirectory): this C library has no posix_spawn_file_actions_addchdir_np (glibc 2.29 or later)")
            }
            typealias AddChdir = @convention(c) (UnsafeMutablePointer<posix_spawn_file_actions_t>, UnsafePointer<CChar>) -> Int32
            _ = unsafeBitCast(symbol, to: AddChdir.self)(&actions, currentDirectory)
        }
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        var noSignals = sigset_t()
        sigemptyset(&noSignals)
        posix_spawnattr_setsigmask(&attributes, &noSignals)
        var allSignals = sigset_t()
        sigfillset(&allSignals)
        sigdelset(&allSignals, SIGKILL)
        sigdelset(&allSignals, SIGSTOP)
        posix_spawnattr_setsigdefault(&attributes, &allSignals)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF))

        var environmentLines = ProcessInfo.processInfo.environment.merging(environment) { $1 }.map { "\($0.key)=\($0.value)" }
        environmentLines.sort()
        let argv: [UnsafeMutablePointer<CChar>?] = ([executable] + arguments).map { strdup($0) } + [nil]
        let envp: [UnsafeMutablePointer<CChar>?] = environmentLines.map { strdup($0) } + [nil]
        defer {
            argv.forEach { free($0) }
            envp.forEach { free($0) }
        }
        var child: pid_t = 0
        let spawned = posix_spawn(&child, executable, &actions, &attributes, argv, envp)
        guard spawned == 0 else {
            ours.forEach { close($0) }
            throw ChildError("cannot start \(executable): \(String(cString: strerror(spawned)))")
        }
        self.pid = child
        self.input = input
        self.output = output
    }

    /// Runs `executable` to its end, `stdin` written to it (else `/dev/null`), its stdout and
    /// stderr read together; how it ended and what it printed. Blocks: run it off the pool.
    public static func run(_ executable: String, _ arguments: [String], environment: [String: String] = [:], currentDirectory: String? = nil,
                           stdin: [UInt8]? = nil) throws -> (ending: Ending, output: String) {
        let child = try SpawnedProcess(executable, arguments, environment: environment, currentDirectory: currentDirectory,
                                       stdin: stdin == nil ? .null : .pipe, stdout: .pipe, stderr: .stdout)
        var writer: Thread?
        if let stdin {
            writer = Thread {
                child.write(stdin)
                child.closeInput()
            }
            writer?.start()
        }
        let output = child.readOutputToEnd()
        let ending = child.wait()
        while let writer, !writer.isFinished { usleep(1000) }
        return (ending, String(decoding: output, as: UTF8.self))
    }

    deinit {
        if ending.withLock({ $0 }) == nil {
            _ = Glibc.kill(pid, SIGKILL)
            _ = wait()
        }
        closeInput()
        if output >= 0 { close(output) }
    }

    /// `pipe`, both ends close-on-exec: no other child started meanwhile keeps an end open
    /// (`pipe2`, which would do it at once, is not imported by Swift's Glibc module; children
    /// started here close every descriptor above 2 anyway).
    private static func closeOnExecPipe(_ ends: inout [Int32]) throws {
        guard pipe(&ends) == 0 else { throw ChildError("pipe: \(String(cString: strerror(errno)))") }
        for end in ends { _ = fcntl(end, F_SETFD, FD_CLOEXEC) }
    }

    /// Sends `signal` to the child, unless it was already reaped (its pid may be another's now).
    public func signal(_ signal: Int32) {
        ending.withLock { ending in
            if ending == nil { _ = Glibc.kill(pid, signal) }
        }
    }

    /// Closes ``input``: the child reads end-of-file. Safe to call more than once.
    public func closeInput() {
        guard input >= 0, inputOpen.exchange(false, ordering: .sequentiallyConsistent) else { return }
        close(input)
    }

    /// Writes `bytes` whole to the child's stdin; false when the child is gone (EPIPE) or the
    /// input was closed.
    @discardableResult
    public func write(_ bytes: some Collection<UInt8>) -> Bool {
        guard input >= 0, inputOpen.load(ordering: .sequentiallyConsistent) else { return false }
        return Array(bytes).withUnsafeBytes { raw in
            var done = 0
            while done < raw.count {
                let n = Glibc.write(input, raw.baseAddress! + done, raw.count - done)
                if n < 0 && errno == EINTR { continue }
                guard n > 0 else { return false }
                done += n
            }
            return true
        }
    }

    /// Reads ``output`` to its end (the child exited, or closed its stdout).
    public func readOutputToEnd() -> [UInt8] {
        precondition(output >= 0, "stdout is not a pipe")
        var all: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 65536)
        while true {
            let n = read(output, &chunk, chunk.count)
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return all }
            all += chunk[..<n]
        }
    }

    /// How the child ended, once it has (reaping it); nil while it runs.
    public var endingIfEnded: Ending? {
        if let known = ending.withLock({ $0 }) { return known.ending }
        return reap(blocking: false)?.ending
    }

    /// The status `waitpid` reported, core-dump bit included, once the child was reaped (nil
    /// before): for a caller that prints it as the shell would.
    public var waitStatus: Int32? { ending.withLock { $0?.status } }

    /// The CPU time the child used, user and system, in seconds, once it was reaped (nil before):
    /// what a benchmark charges to a child process.
    public var cpuSeconds: Double? { ending.withLock { $0?.cpuSeconds } }

    /// Whether the child still runs.
    public var isRunning: Bool { endingIfEnded == nil }

    /// Waits for the child to end (blocking this thread: run it off the concurrency pool) and
    /// reaps it.
    @discardableResult
    public func wait() -> Ending {
        while true {
            if let known = ending.withLock({ $0 }) { return known.ending }
            if let ended = reap(blocking: true) { return ended.ending }
            usleep(1000)  // another thread is reaping it: its result is moments away
        }
    }

    /// Waits at most `timeout` for the child to end; SIGKILL after it. Returns how it ended.
    @discardableResult
    public func wait(killingAfter timeout: Duration) -> Ending {
        let deadline = ContinuousClock.now + timeout
        while ContinuousClock.now < deadline {
            if let ended = endingIfEnded { return ended }
            usleep(10_000)
        }
        signal(SIGKILL)
        return wait()
    }

    /// What `wait4` reported once the child ended.
    private struct Reaped: Sendable {
        var ending: Ending
        var status: Int32
        var cpuSeconds: Double
    }

    /// `wait4` once; the ending is recorded (under the lock, so that ``signal(_:)`` never
    /// signals a reaped pid).
    private func reap(blocking: Bool) -> Reaped? {
        var status: Int32 = 0
        var usage = rusage()
        while true {
            let result = wait4(pid, &status, blocking ? 0 : WNOHANG, &usage)
            if result < 0 && errno == EINTR { continue }
            guard result == pid else { return ending.withLock { $0 } }
            func seconds(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1e6 }
            let reaped = Reaped(ending: (status & 0x7F) == 0 ? .exited((status >> 8) & 0xFF) : .signalled(status & 0x7F),
                                status: status, cpuSeconds: seconds(usage.ru_utime) + seconds(usage.ru_stime))
            ending.withLock { $0 = reaped }
            return reaped
        }
    }
}
