import Beacon
import BeaconTesting
import Foundation
import Glibc

/// End to end: `Beacon.track` of the WORKLOAD event with the default policies (durability 100
/// records / 10 ms, 50 events per request, count trigger at 100 pending, 15 s interval) to the
/// `LoopbackCollector` over HTTP, timed from the first `track` until the collector has accepted
/// every event.
enum EndToEndPhase: BenchPhase {
    static let name = "endtoend"
    static let summary = "Beacon.track -> loopback collector with the default delivery policies"

    static func runRound(_ context: BenchContext) throws -> [Figure] {
        let n = context.quick ? 10_000 : 100_000
        let users = (0..<1000).map { "user-\($0)" }
        let collector = try LoopbackCollector()
        collector.retainsBodies = false
        defer { collector.stop() }
        var config = Beacon.Configuration(directory: try context.scratch("beacon-endtoend"), serverURL: collector.url)
        config.lifecycleEvents = false
        config.maxBytes = 4 << 30
        let beacon = try Beacon(configuration: config)
        let seconds = time {
            for i in 0..<n {
                beacon.track("Purchase", properties: ["price": 9.99, "item": "book", "count": 3, "vip": true], distinctId: users[i % 1000])
            }
            // The count trigger only fires at 100 pending; the tail (< 100) would wait for the
            // 15 s interval, so the last partial batch is flushed as an application would at a
            // natural boundary.
            while collector.acceptedEventCount < n - 100 { usleep(200) }
            _ = blockOn { await beacon.flush() }
            while collector.acceptedEventCount < n { usleep(200) }
        }
        let stats = blockOn { await beacon.deliveryStats }
        _ = blockOn { await beacon.shutdown(deadline: .seconds(5)) }
        guard collector.acceptedEventCount == n else {
            throw BenchFailure("endtoend: the collector accepted \(collector.acceptedEventCount) of \(n)")
        }
        let bytes = Int(stats.sentBytes)
        return [
            .throughput("beacon", "endtoend", "default", n: n, bytes: bytes, seconds: seconds),
            .value("beacon", "endtoend", "requests", Double(stats.sentRequests), fields: [("n", String(n))]),
        ]
    }
}
