import Foundation
import Glibc
import Testing
import BeaconTestTraits

/// Issue 26's first case from outside: `beacon send --follow` on an empty directory while `beacon
/// append` writes into it, counted at `beacon collect`. The input arrives in chunks of random size
/// at random moments (a seeded generator), so the sender reads while the appender writes at
/// every kind of point. Longer runs: `Benchmarks/append-follow.sh`.
@Suite("beacon append while beacon send --follow runs", .serialized, .blocking)
struct AppendWhileFollowTests {
    @Test("every event arrives, none passed over as corrupt, none dropped", arguments: [
        (UInt64(1), "batch", 50, 12_000), (2, "none", 500, 12_000), (3, "each", 50, 1_500),
    ])
    func everyEventArrives(seed: UInt64, sync: String, batch: Int, count: Int) throws {
        try withTemporaryDirectory { dir in
            var random = SeededGenerator(seed: seed)
            let out = dir + ".collected"
            defer { try? FileManager.default.removeItem(atPath: out) }
            let (collector, url) = try startCollector(out: out)
            defer { _ = collector.signal(SIGTERM) }
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
            // The stop below comes while the last answer may still be on its way: send waits for
            // it (up to --grace; 60 s, so that a loaded machine cannot make it late). Before send
            // waited, the stop cancelled that request: 24 events stayed pending once in three
            // loaded runs of the whole suite.
            let sender = try RunningTool(["send", dir, "--url", url, "--batch", String(batch), "--follow", "--grace", "60"])
            defer { sender.kill() }
            let appender = try RunningTool(["append", dir, "--sync", sync])
            let all = events(count)
            var sent = 0
            while sent < count {
                let chunk = min(count - sent, Int.random(in: 1...2_000, using: &random))
                try appender.send(Array(all[sent..<(sent + chunk)]))
                sent += chunk
                if Bool.random(using: &random) { usleep(UInt32.random(in: 0...20_000, using: &random)) }
            }
            let appended = try appender.finish()
            #expect(appended.status == 0, "\(appended.stderr)")
            let trackIDs = { Set(lines(of: out).compactMap { line in line.range(of: #""_track_id":\d+"#, options: .regularExpression).map { String(line[$0]) } }) }
            #expect(eventually(within: 120) { trackIDs().count == count }, "the collector got \(trackIDs().count) of \(count) distinct events")
            let stopped = sender.signal(SIGTERM)
            #expect(stopped.status == 0, "\(stopped.stderr)")
            let status = try statusJSON(dir)
            #expect(status["corrupt_skipped"] as? Int == 0, "\(status)")
            #expect((status["dropped"] as? [String: Any])?.isEmpty == true, "\(status)")
            #expect(status["pending_records"] as? Int == 0, "\(status)")
            print("append --sync \(sync) while send --batch \(batch) --follow: \(count) events, \(lines(of: out).count) received, \(trackIDs().count) distinct")
        }
    }
}
