import Beacon
import Foundation
import Glibc

/// End to end: `Beacon.track` of the workload's event with the default policies (durability 100
/// records / 10 ms, 50 events per request, count trigger at 100 pending, 15 s interval) to the
/// loopback collector in a child process, timed from the first `track` until the collector has
/// accepted every event; the peak RSS of this process meanwhile. Beside it, `raw`: the URLSession
/// loop of the upload phase at 50 events per request to the same collector, sending the same
/// events (the tracker's, with its identity and properties: larger than the workload's).
enum EndToEndPhase: BenchPhase {
    static let name = "endtoend"
    static let summary = "Beacon.track -> collector process with the default delivery policies, vs a URLSession loop at batch 50"

    static func runRound(_ context: BenchContext) throws -> [Figure] {
        let n = context.quick ? 10_000 : 100_000
        let users = (0..<1000).map { "user-\($0)" }
        let collector = try BenchCollector(.loopback, directory: context.directory)
        defer { collector.stop() }
        var config = Beacon.Configuration(directory: try context.scratch("beacon-endtoend"), serverURL: collector.url)
        config.lifecycleEvents = false
        config.maxBytes = 4 << 30
        let beacon = try Beacon(configuration: config)
        let start = Memory.currentMiB
        let (seconds, peak) = try Memory.peak { try time {
            for i in 0..<n {
                beacon.track("Purchase", properties: ["price": 9.99, "item": "book", "count": 3, "vip": true], distinctId: users[i % 1000])
            }
            // The count trigger only fires at 100 pending; the tail (< 100) would wait for the
            // 15 s interval, so the last partial batch is flushed as an application would at a
            // natural boundary.
            try collector.waitForEvents(n - 100)
            _ = blockOn { await beacon.flush() }
            try collector.waitForEvents(n)
        } }
        let stats = blockOn { await beacon.deliveryStats }
        _ = blockOn { await beacon.shutdown(deadline: .seconds(5)) }
        guard let accepted = try collector.stats()?.events, accepted == n else {
            throw BenchFailure("endtoend: the collector accepted \(String(describing: try? collector.stats())) of \(n) events")
        }
        let events = try trackedEvents(context, n: n, users: users)
        let bodies = URLSessionLoop.bodies(events, batch: 50, gzip: false)
        // Timed as Beacon's run is, with the RSS sampler running.
        let rawStart = Memory.currentMiB
        let (rawSeconds, rawPeak) = try Memory.peak { try URLSessionLoop.run(bodies, to: collector.url, gzip: false) }
        return [
            .throughput("beacon", "endtoend", "default", n: n, bytes: Int(stats.sentBytes), seconds: seconds),
            .throughput("raw", "endtoend", "default", n: n, bytes: bodies.reduce(0) { $0 + $1.count }, seconds: rawSeconds),
            .value("beacon", "endtoend", "requests", Double(stats.sentRequests), fields: [("n", String(n))]),
            .value("beacon", "endtoend", "peak_rss_mib", peak, fields: [("start_mib", format(start, 1))]),
            .value("raw", "endtoend", "peak_rss_mib", rawPeak, fields: [("start_mib", format(rawStart, 1))]),
        ]
    }

    /// The events exactly as the tracker stores and sends them (the same `track` calls, into a
    /// log without delivery), so that the loop sends the same bodies as Beacon.
    static func trackedEvents(_ context: BenchContext, n: Int, users: [String]) throws -> [[UInt8]] {
        let dir = try context.scratch("beacon-endtoend-events")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var config = Beacon.Configuration(directory: dir)
        config.lifecycleEvents = false
        config.maxBytes = 4 << 30
        let beacon = try Beacon(configuration: config)
        for i in 0..<n {
            beacon.track("Purchase", properties: ["price": 9.99, "item": "book", "count": 3, "vip": true], distinctId: users[i % 1000])
        }
        _ = blockOn { await beacon.shutdown(deadline: .seconds(5)) }
        let log = try BeaconLog(directory: dir)
        defer { try? log.close() }
        var events: [[UInt8]] = []
        var batch = try log.read(maxRecords: n, maxBytes: Int.max)
        while !batch.isEmpty {
            events += batch.records.map { Array($0) }
            batch = try log.read(from: batch.end, maxRecords: n, maxBytes: Int.max)
        }
        guard events.count == n else { throw BenchFailure("endtoend: the tracker stored \(events.count) of \(n) events") }
        return events
    }
}
