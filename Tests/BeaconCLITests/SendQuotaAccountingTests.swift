import Foundation
import Glibc
import Synchronization
import Testing
import BeaconTestTraits

/// Issue 26's second case from outside: the quota runs in `beacon append`, the reader is `beacon
/// send`, and what `beacon status` counts as dropped is compared with what the collector got.
@Suite("beacon append --max-disk while beacon send holds a batch", .serialized, .blocking)
struct SendQuotaAccountingTests {
    /// Events of about 330 bytes, each with its number in `_track_id`.
    func paddedEvents(_ n: Int, from: Int) -> [String] {
        let pad = String(repeating: "x", count: 200)
        return (from..<(from + n)).map { #"{"event":"Purchase","_track_id":\#($0),"properties":{"pad":"\#(pad)"}}"# }
    }

    @Test("a batch in flight while the quota deletes its segment, and the rest of that segment, are delivered and not counted as dropped: dropped + delivered == appended")
    func droppedPlusDeliveredIsAppended() throws {
        try withTemporaryDirectory { dir in
            // The collector holds its first request until `release`, then answers 200 to all;
            // it keeps the _track_id of every event it accepted.
            let state = Mutex((released: false, ids: [Int]()))
            let server = try ScriptedServer { connection, _ in
                while let (_, body) = connection.readRequest() {
                    while !state.withLock({ $0.released }) { usleep(10_000) }
                    let text = String(decoding: body, as: UTF8.self)
                    let ids = text.matches(of: /"_track_id":(\d+)/).compactMap { Int($0.1) }
                    state.withLock { $0.ids += ids }
                    connection.answer(200)
                }
            }
            defer { server.stop() }
            let first = 30_000, second = 50_000
            let appendFirst = try BeaconToolRunner.run(["append", dir, "--max-disk", "16777216"], stdin: stdinData(paddedEvents(first, from: 0)))
            #expect(appendFirst.status == 0, "\(appendFirst.stderr)")
            let sender = try RunningTool(["send", dir, "--url", "http://127.0.0.1:\(server.port)/events", "--batch", "500", "--retries", "1000"])
            defer { sender.kill() }
            #expect(eventually(within: 30) { server.requests >= 1 }, "the first batch is in flight")
            let appendSecond = try BeaconToolRunner.run(["append", dir, "--max-disk", "16777216"], stdin: stdinData(paddedEvents(second, from: first)))
            #expect(appendSecond.status == 0, "\(appendSecond.stderr)")
            #expect(appendSecond.stderr.contains("quota"), "the quota dropped segments: \(appendSecond.stderr)")
            state.withLock { $0.released = true }
            let sent = try sender.finish()
            #expect(sent.status == 0, "\(sent.stderr)")
            let ids = state.withLock { $0.ids }
            let delivered = Set(ids)
            let status = try statusJSON(dir)
            let dropped = (status["dropped"] as? [String: Any])?["quotaDeleted"] as? Int ?? 0
            print("append --max-disk 16 MiB of \(first) + \(second) events while send held a batch: collector got \(delivered.count) distinct (\(ids.count) in all), status dropped \(dropped)")
            #expect(dropped + delivered.count == first + second, "dropped \(dropped) + delivered \(delivered.count) != \(first + second)")
            #expect(status["pending_records"] as? Int == 0, "\(status)")
        }
    }
}
