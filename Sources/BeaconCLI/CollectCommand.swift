import BeaconHTTPServer
import Foundation
import Glibc
import Synchronization

/// `beacon collect`: a loopback collector for local development.
struct CollectCommand: Command {
    static let name = "collect"
    static let summary = "Run a local HTTP collector that prints or stores the events it receives"
    static let usage = """
        beacon collect [--port P] [--out FILE] [--status CODE]
          Listens on 127.0.0.1:P for upload requests (HTTP/1.1, Content-Length or chunked
          bodies, gzip, keep-alive; JSON array, envelope or NDJSON bodies) and appends the events
          of every accepted request to FILE, or standard output, one JSON line each, in the order
          received (a batch re-sent after a lost answer appears twice). Runs until SIGINT or
          SIGTERM, then prints a summary on standard error.
          --port P       TCP port (default 8080; 0 picks a free one, printed on standard error)
          --out FILE     append events to FILE (created with mode 0600) instead of standard output
          --status CODE  answer every request with this status (default 200), to watch an
                         uploader retry (503), split (413), bisect (400) or pause (401)
          Exit: 0 after a signal, 64 usage, 74 the port or FILE could not be opened.
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let args = try ParsedArguments(arguments, options: ["--port", "--out", "--status"], positionals: 0...0)
        let port = try args.integer("--port", default: 8080, in: 0...65_535)
        let status = try args.integer("--status", default: 200, in: 100...599)
        var fd: Int32 = 1
        if let path = args.value("--out") {
            fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
            guard fd >= 0 else { throw CLIError(.ioError, "cannot open \(path): \(String(cString: strerror(errno))); check the path and permissions") }
        }
        defer { if fd != 1 { close(fd) } }
        Interruption.install()
        let output = EventOutput(fd: fd)
        let collector: LoopbackCollector
        do {
            collector = try LoopbackCollector(port: UInt16(port)) { request in
                guard let status = request.status, status / 100 == 2, let events = request.events else { return }
                output.write(events)
            }
        } catch {
            throw CLIError(.ioError, "cannot listen on 127.0.0.1:\(port): \(error); choose another --port")
        }
        if status != 200 { collector.defaultReply = .status(status) }
        Console.writeError("beacon collect: listening on \(collector.url) (answering \(status)); stop with Ctrl-C\n")
        while Interruption.signal == 0 { pause() }
        collector.stop()
        let requests = collector.requests
        let accepted = requests.filter { ($0.status ?? 0) / 100 == 2 }
        Console.writeError("beacon collect: \(requests.count) requests, \(accepted.count) accepted with \(accepted.reduce(0) { $0 + ($1.events?.count ?? 0) }) events\(output.failure.map { "; writing failed: \($0)" } ?? "")\n")
        return output.failure == nil ? ExitCode.ok.rawValue : ExitCode.ioError.rawValue
    }

    /// Writes events as lines, one request at a time, from the collector's connection threads.
    final class EventOutput: Sendable {
        let fd: Int32
        let lock = Mutex<String?>(nil)

        init(fd: Int32) { self.fd = fd }

        func write(_ events: [[UInt8]]) {
            var bytes: [UInt8] = []
            for event in events {
                bytes.append(contentsOf: event)
                bytes.append(0x0A)
            }
            lock.withLock { failure in
                guard failure == nil else { return }
                do { try bytes.withUnsafeBytes { try Console.writeAll(fd, $0) } } catch { failure = "\(error)" }
            }
        }

        var failure: String? { lock.withLock { $0 } }
    }
}
