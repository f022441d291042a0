import Foundation
import Glibc

/// The physical limit of a paced uploader on this machine, measured beside it, as ``CommitFloor``
/// is the writer's: what its requests alone cost when nothing else runs. One thread keeps one
/// connection to the same collector and POSTs a body of `eventsPerRequest` events and
/// `bytesPerRequest` bytes `requestsPerSecond` times a second (sleeping between requests, as the
/// uploader waits for the count trigger), with the ``KeepAliveLoop``'s minimal request: one
/// `writev`, the answer's head and `Content-Length` bytes read. Its CPU time per request
/// (`getrusage(RUSAGE_THREAD)`: the loopback send, which also pays the receiving side's softirq,
/// and the sleep's wakeup) is what any design delivering that many requests pays here, before it
/// reads a byte of its log or records an acknowledgement.
struct DeliveryFloor {
    var cpuMicrosecondsPerRequest = 0.0
    var switchesPerRequest = 0.0
    var requests = 0

    static func measure(requestsPerSecond: Double, eventsPerRequest: Int, bytesPerRequest: Int, seconds: Double, port: UInt16) throws -> DeliveryFloor {
        guard requestsPerSecond > 0, eventsPerRequest > 0 else { return DeliveryFloor() }
        let period = UInt64(1e9 / requestsPerSecond)
        let count = max(1, Int(requestsPerSecond * seconds))
        let body = Self.body(events: eventsPerRequest, bytes: bytesPerRequest)
        let outcome = Outcome()
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            defer { done.signal() }
            do {
                outcome.floor = try loop(body: body, count: count, period: period, port: port)
            } catch {
                outcome.failure = "\(error)"
            }
        }
        thread.start()
        done.wait()
        if let failure = outcome.failure { throw BenchFailure("paced delivery floor: \(failure)") }
        return outcome.floor
    }

    /// A JSON array of `events` objects of about `bytes / events` bytes each.
    static func body(events: Int, bytes: Int) -> [UInt8] {
        let shell = #"{"event":"Purchase","properties":{"pad":""}}"#
        let pad = max(0, bytes / events - shell.utf8.count - 1)
        let event = Array(#"{"event":"Purchase","properties":{"pad":"\#(String(repeating: "x", count: pad))"}}"#.utf8)
        return KeepAliveLoop.bodies(Array(repeating: event, count: events), batch: events, gzip: false)[0]
    }

    private static func loop(body: [UInt8], count: Int, period: UInt64, port: UInt16) throws -> DeliveryFloor {
        let fd = try KeepAliveLoop.connect(port: port)
        defer { close(fd) }
        let head = Array("POST /events HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nContent-Type: application/json\r\nContent-Length: \(body.count)\r\n\r\n".utf8)
        var answer = [UInt8](repeating: 0, count: 16_384)
        let (cpu0, switches0) = CommitFloor.threadUsage()
        var next = PacedPhase.monotonicNanoseconds() + period
        for _ in 0..<count {
            PacedPhase.sleep(untilNanoseconds: next)
            next += period
            try head.withUnsafeBytes { h in try body.withUnsafeBytes { b in try KeepAliveLoop.writeAll(fd, h, b) } }
            try KeepAliveLoop.readAnswer(fd, &answer, port: port)
        }
        let (cpu1, switches1) = CommitFloor.threadUsage()
        return DeliveryFloor(cpuMicrosecondsPerRequest: (cpu1 - cpu0) / Double(count) * 1e6,
                             switchesPerRequest: Double(switches1 - switches0) / Double(count), requests: count)
    }

    /// What the measuring thread hands back (read after it signalled).
    private final class Outcome: @unchecked Sendable {
        var floor = DeliveryFloor()
        var failure: String?
    }
}
