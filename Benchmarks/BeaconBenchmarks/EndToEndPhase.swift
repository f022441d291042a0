import Beacon
import BeaconLog
import Foundation
import Glibc
import BeaconURLSession

/// End to end: `Beacon.track` of the workload's event with the default policies (durability 100
/// records / 10 ms, 50 events per request, count trigger at 100 pending, 15 s interval) to the
/// loopback collector in a child process, timed from the first `track` until the collector has
/// accepted every event; the peak RSS of this process meanwhile. Mode `default` uses the default
/// transport (Beacon's own client for this plain-http collector), mode `urlsession` the
/// `HTTPTransport`. Beside them, `raw`: the URLSession loop of the upload phase at 50 events per
/// request to the same collector, sending the same events (the tracker's, with its identity and
/// properties: larger than the workload's).
enum EndToEndPhase: BenchPhase {
    static let name = "endtoend"
    static let summary = "Beacon.track -> collector process with the default delivery policies (default transport, and URLSession), vs a URLSession loop at batch 50"

    static func runRound(_ context: BenchContext) throws -> [Figure] {
        let n = context.quick ? 10_000 : 100_000
        let users = (0..<1000).map { "user-\($0)" }
        let collector = try BenchCollector(.loopback, directory: context.directory)
        defer { collector.stop() }
        // With the default transport (Beacon's own client for this http collector), then with
        // URLSession, the loop's own client.
        var figures: [Figure] = []
        for (mode, transport) in [("default", nil), ("urlsession", HTTPTransport())] as [(String, (any Transport)?)] {
            figures += try tracked(context, collector, n: n, users: users, mode: mode, transport: transport)
        }
        let events = try trackedEvents(context, n: n, users: users)
        let bodies = URLSessionLoop.bodies(events, batch: 50, gzip: false)
        // Timed as Beacon's run is, with the RSS sampler running.
        let rawStart = Memory.currentMiB
        let (rawSeconds, rawPeak) = try Memory.peak { try URLSessionLoop.run(bodies, to: collector.url, gzip: false) }
        let rawBytes = bodies.reduce(0) { $0 + $1.count }
        for mode in ["default", "urlsession"] {
            figures.append(.throughput("raw", "endtoend", mode, n: n, bytes: rawBytes, seconds: rawSeconds))
        }
        figures.append(.value("raw", "endtoend", "peak_rss_mib", rawPeak, fields: [("start_mib", format(rawStart, 1))]))
        return figures
    }

    /// `n` events tracked with the default policies and `transport` (nil: the default), timed
    /// from the first `track` until the collector has them all.
    static func tracked(_ context: BenchContext, _ collector: BenchCollector, n: Int, users: [String], mode: String, transport: (any Transport)?) throws -> [Figure] {
        let before = try collector.stats()?.events ?? 0
        var config = Beacon.Configuration(directory: try context.scratch("beacon-endtoend-\(mode)"), serverURL: collector.url)
        config.lifecycleEvents = false
        config.storage.maxBytes = 4 << 30
        config.backpressure = .blockCallingThread(timeout: .seconds(30))   // the benchmark's own thread
        config.transport = transport
        let beacon = try Beacon(configuration: config)
        let start = Memory.currentMiB
        let (seconds, peak) = try Memory.peak { try time {
            for i in 0..<n {
                beacon.track("Purchase", properties: ["price": 9.99, "item": "book", "count": 3, "vip": true], distinctId: users[i % 1000])
            }
            // The count trigger only fires at 100 pending; the tail (< 100) would wait for the
            // 15 s interval, so the last partial batch is flushed as an application would at a
            // natural boundary.
            try collector.waitForEvents(before + n - 100)
            _ = blockOn { await beacon.flush() }
            try collector.waitForEvents(before + n)
        } }
        let stats = beacon.deliveryStats
        _ = blockOn { await beacon.shutdown(timeout: .seconds(5)) }
        guard let accepted = try collector.stats()?.events, accepted - before == n else {
            throw BenchFailure("endtoend: the collector accepted \(String(describing: try? collector.stats())) of \(n) events")
        }
        return [
            .throughput("beacon", "endtoend", mode, n: n, bytes: Int(stats.sentBytes), seconds: seconds),
            .value("beacon", "endtoend", "requests_\(mode)", Double(stats.sentRequests), fields: [("n", String(n))]),
            .value("beacon", "endtoend", "peak_rss_mib_\(mode)", peak, fields: [("start_mib", format(start, 1))]),
        ]
    }

    /// The events exactly as the tracker stores and sends them (the same `track` calls, into a
    /// log without delivery), so that the loop sends the same bodies as Beacon.
    static func trackedEvents(_ context: BenchContext, n: Int, users: [String]) throws -> [[UInt8]] {
        let dir = try context.scratch("beacon-endtoend-events")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var config = Beacon.Configuration(directory: dir)
        config.lifecycleEvents = false
        config.storage.maxBytes = 4 << 30
        config.backpressure = .blockCallingThread(timeout: .seconds(30))
        let beacon = try Beacon(configuration: config)
        for i in 0..<n {
            beacon.track("Purchase", properties: ["price": 9.99, "item": "book", "count": 3, "vip": true], distinctId: users[i % 1000])
        }
        _ = blockOn { await beacon.shutdown(timeout: .seconds(5)) }
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
