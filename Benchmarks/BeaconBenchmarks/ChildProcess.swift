import BeaconTestSupport
import Foundation
import Glibc

/// A child process spoken to over its standard input and output, one line at a time: a
/// ``SpawnedProcess`` (as the tests start their children) with a line reader.
///
/// The child's standard input is a pipe whose write end only this process holds: when this
/// process ends, however it ends (an error, a signal, `kill -9`), the child reads end-of-file and
/// exits; ``stop()`` closes the pipe itself and reaps the child, killing it if it lingers.
final class ChildProcess {
    private let process: SpawnedProcess
    private var buffered: [UInt8] = []

    var pid: pid_t { process.pid }

    /// Starts this benchmark's own executable with `arguments`.
    convenience init(benchArguments arguments: [String]) throws {
        let path = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
        try self.init(path: path, arguments: arguments)
    }

    /// Starts `path` with `arguments`; its standard error is this process's.
    init(path: String, arguments: [String]) throws {
        do {
            process = try SpawnedProcess(path, arguments, stdin: .pipe, stdout: .pipe)
        } catch {
            throw BenchFailure("\(error)")
        }
    }

    deinit {
        stop()
    }

    /// Sends one line.
    func send(_ line: String) throws {
        guard process.write(Array((line + "\n").utf8)) else {
            throw BenchFailure("the child process \(pid) is gone (writing to it: \(String(cString: strerror(errno))))")
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
            var poller = pollfd(fd: process.output, events: Int16(POLLIN), revents: 0)
            let ready = poll(&poller, 1, Int32(min(left, 1) * 1000) + 1)
            if ready < 0 && errno == EINTR { continue }
            guard ready >= 0 else { throw BenchFailure("poll: \(String(cString: strerror(errno)))") }
            if ready == 0 { continue }
            var chunk = [UInt8](repeating: 0, count: 4096)
            let n = read(process.output, &chunk, chunk.count)
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw BenchFailure("the child process \(pid) exited before answering") }
            buffered += chunk[..<n]
        }
    }

    /// Closes the child's input (it exits at end-of-file) and reaps it; after 5 s it is killed.
    func stop() {
        process.closeInput()
        process.wait(killingAfter: .seconds(5))
    }
}
