import Beacon
import BeaconLog
import Foundation
import Glibc

/// `track` end to end: the benchmark's `Purchase` event tracked through `Beacon.track` (validate, encode on the
/// caller's thread, hand-off, one writer group-committing through BeaconLog under the default
/// durability), timed until every event is durable (`beacon.sync()`), with 1 and 2 producer
/// threads, with the process's CPU time per event; and the encode cost alone (`validate`, which
/// validates and encodes without queuing), in ns/event.
///
/// The event: `track("Purchase", properties: ["price": 9.99, "item": "book", "count": 3, "vip": true],
/// distinctId: "user-<i % 1000>")`, the dictionary literal written per call as a caller would,
/// plus the presets `$lib`, `$lib_version`, `$os`, `$os_version`, `$model` (9 properties).
enum TrackPhase: BenchPhase {
    static let name = "track"
    static let summary = "Beacon.track end to end to durable (default policy), 1 and 2 producers; encode ns/event"

    static func runRound(_ context: BenchContext) throws -> [Figure] {
        let n = context.n("none")
        let users = (0..<1000).map { "user-\($0)" }
        var figures: [Figure] = []
        for producers in [1, 2] {
            let config = configuration(try context.scratch("beacon-track-\(producers)"))
            let beacon = try Beacon(configuration: config)
            let perThread = n / producers
            let cpuBefore = processCPUSeconds()
            let seconds = try time {
                if producers == 1 {
                    trackLoop(beacon, users, 0..<perThread)
                } else {
                    let group = DispatchGroup()
                    for p in 0..<producers {
                        group.enter()
                        let range = (p * perThread)..<((p + 1) * perThread)
                        Thread {
                            trackLoop(beacon, users, range)
                            group.leave()
                        }.start()
                    }
                    group.wait()
                }
                try beacon.sync()
            }
            let cpu = processCPUSeconds() - cpuBefore
            let stats = beacon.stats
            beacon.closeNow()
            guard stats.durable == UInt64(perThread * producers), stats.droppedTotal == 0, stats.invalid == 0 else {
                throw BenchFailure("track: \(stats.durable) of \(perThread * producers) durable, dropped \(stats.dropped), invalid \(stats.invalid)")
            }
            let bytes = try directoryBytes(config.directory)
            figures.append(.throughput("beacon", "track", "producers\(producers)", n: perThread * producers, bytes: bytes, seconds: seconds))
            // CPU time of the whole process (producers + writer, user + system) per event: unlike
            // events/s it hardly moves when other processes load the machine.
            figures.append(.value("beacon", "track", "cpu_ns_producers\(producers)", cpu / Double(perThread * producers) * 1e9, fields: [("n", String(perThread * producers))]))
        }
        // Encode alone: validate() validates and builds the same bytes as track and drops them; the
        // caller's dictionary is built once, outside the loop (its cost is the caller's).
        let beacon = try Beacon(configuration: configuration(try context.scratch("beacon-track-encode")))
        let properties: [String: PropertyValue] = ["price": 9.99, "item": "book", "count": 3, "vip": true]
        let encodeSeconds = try time {
            for i in 0..<n {
                try beacon.validate("Purchase", properties: properties, distinctId: users[i % 1000])
            }
        }
        beacon.closeNow()
        figures.append(.value("beacon", "track", "encode_ns", encodeSeconds / Double(n) * 1e9, fields: [("n", String(n))]))
        return figures
    }

    static func configuration(_ directory: String) -> Beacon.Configuration {
        var config = Beacon.Configuration(directory: directory)
        config.lifecycleEvents = false
        config.storage.maxBytes = 4 << 30
        // The producers are the benchmark's own threads: wait for the disk rather than drop.
        config.backpressure = .blockCallingThread(timeout: .seconds(30))
        return config
    }

    static func trackLoop(_ beacon: Beacon, _ users: [String], _ range: Range<Int>) {
        for i in range {
            beacon.track("Purchase", properties: ["price": 9.99, "item": "book", "count": 3, "vip": true], distinctId: users[i % 1000])
        }
    }

    /// User + system CPU time of this process so far (`getrusage(RUSAGE_SELF)`), in seconds.
    static func processCPUSeconds() -> Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        return Double(usage.ru_utime.tv_sec) + Double(usage.ru_utime.tv_usec) / 1e6 + Double(usage.ru_stime.tv_sec) + Double(usage.ru_stime.tv_usec) / 1e6
    }

    /// The event bytes in the log (no framing, no newline), read after the timed region: the
    /// "payload bytes" every MB/s figure counts.
    static func directoryBytes(_ directory: String) throws -> Int {
        var config = BeaconLog.Configuration(directory: directory)
        config.access = .readOnly
        let log = try BeaconLog(configuration: config)
        defer { try? log.close() }
        var total = 0
        var cursor: LogPosition?
        while true {
            let batch = try log.read(from: cursor, maxRecords: 10_000, maxBytes: 16 << 20)
            if batch.isEmpty { break }
            total += batch.byteCount
            cursor = batch.end
        }
        return total
    }
}

struct BenchFailure: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}
