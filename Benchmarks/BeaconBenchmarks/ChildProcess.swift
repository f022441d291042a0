import Foundation
import Glibc

/// A child process spoken to over its standard input and output, one line at a time.
///
/// The child's standard input is a pipe whose write end only this process holds: when this
/// process ends, however it ends (an error, a signal, `kill -9`), the child reads end-of-file and
/// exits; ``stop()`` closes the pipe itself and reaps the child, killing it if it lingers.
final class ChildProcess {
    let pid: pid_t
    private var input: Int32
    private let output: Int32
    private var buffered: [UInt8] = []
    private var reaped = false

    /// Starts `/proc/self/exe` (this benchmark) with `arguments`.
    convenience init(benchArguments arguments: [String]) throws {
        let path = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        try self.init(path: path, arguments: arguments)
    }

    /// Starts `path` with `arguments`; its standard error is this process's.
    init(path: String, arguments: [String]) throws {
        var toChild: [Int32] = [0, 0]
        var fromChild: [Int32] = [0, 0]
        guard pipe(&toChild) == 0 else { throw BenchFailure("pipe: \(String(cString: strerror(errno)))") }
        guard pipe(&fromChild) == 0 else {
            close(toChild[0]); close(toChild[1])
            throw BenchFailure("pipe: \(String(cString: strerror(errno)))")
        }
        // Close-on-exec: no other child (nginx, a later collector) inherits these ends.
        for fd in toChild + fromChild { _ = fcntl(fd, F_SETFD, FD_CLOEXEC) }
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        // dup2 clears close-on-exec on the child's 0 and 1; every other descriptor of ours closes.
        posix_spawn_file_actions_adddup2(&actions, toChild[0], 0)
        posix_spawn_file_actions_adddup2(&actions, fromChild[1], 1)
        let argv = ([path] + arguments).map { strdup($0) } + [nil]
        defer { for pointer in argv { free(pointer) } }
        var pid: pid_t = 0
        let status = posix_spawn(&pid, path, &actions, nil, argv, environ)
        close(toChild[0])
        close(fromChild[1])
        guard status == 0 else {
            close(toChild[1]); close(fromChild[0])
            throw BenchFailure("cannot start \(path): \(String(cString: strerror(status)))")
        }
        self.pid = pid
        self.input = toChild[1]
        self.output = fromChild[0]
    }

    deinit {
        stop()
        close(output)
    }

    /// Sends one line.
    func send(_ line: String) throws {
        let bytes = Array((line + "\n").utf8)
        var done = 0
        while done < bytes.count {
            let n = bytes[done...].withUnsafeBytes { write(input, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw BenchFailure("the child process \(pid) is gone (writing to it: \(String(cString: strerror(errno))))") }
            done += n
        }
    }

    /// The next line the child writes, waiting at most `timeout` seconds.
    func readLine(timeout: Double = 30) throws -> String {
        let end = now() + timeout
        while true {
            if let newline = buffered.firstIndex(of: 0x0A) {
                let line = String(decoding: buffered[..<newline], as: UTF8.self)
                buffered.removeSubrange(...newline)
                return line
            }
            let left = end - now()
            guard left > 0 else { throw BenchFailure("the child process \(pid) did not answer within \(timeout) s") }
            var poller = pollfd(fd: output, events: Int16(POLLIN), revents: 0)
            let ready = poll(&poller, 1, Int32(min(left, 1) * 1000) + 1)
            if ready < 0 && errno == EINTR { continue }
            guard ready >= 0 else { throw BenchFailure("poll: \(String(cString: strerror(errno)))") }
            if ready == 0 { continue }
            var chunk = [UInt8](repeating: 0, count: 4096)
            let n = read(output, &chunk, chunk.count)
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw BenchFailure("the child process \(pid) exited before answering") }
            buffered += chunk[..<n]
        }
    }

    /// Closes the child's input (it exits at end-of-file) and reaps it; after 5 s it is killed.
    func stop() {
        guard !reaped else { return }
        reaped = true
        if input >= 0 {
            close(input)
            input = -1
        }
        let end = now() + 5
        var status: Int32 = 0
        while now() < end {
            let done = waitpid(pid, &status, WNOHANG)
            if done == pid || (done < 0 && errno != EINTR) { return }
            usleep(2000)
        }
        kill(pid, SIGKILL)
        _ = waitpid(pid, &status, 0)
    }
}
