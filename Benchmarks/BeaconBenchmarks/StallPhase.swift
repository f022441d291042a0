import Beacon
import Foundation
import Synchronization

/// A stalled disk must not stall the server. On Swift concurrency's cooperative pool (where
/// Hummingbird runs its handlers), 4 tasks play `/track` requests (each `track`s and yields, flat
/// out) while a probe plays an untracked `/ok` route: every 2 ms a request is due; the probe wakes
/// (a pool thread must be free) and runs a child task that only needs a pool thread; the latency
/// runs from the due time until the child has run. The probe's p50/p99 with the writer working
/// normally, with the writer frozen (the test seam: it takes nothing, like a writer stuck in a
/// stalled disk's fsync) once its hand-off is full, under the default backpressure, and frozen under the former default,
/// `.blockCallingThread(timeout: 100 ms)`, for reference. Done when: frozen p99 within 2x of normal.
enum StallPhase: BenchPhase {
    static let name = "stall"
    static let summary = "an untracked probe's p99 on the cooperative pool while tasks track: writer normal vs frozen"

    static func runRound(_ context: BenchContext) throws -> [Figure] {
        let seconds = context.quick ? 0.5 : 3.0
        var figures: [Figure] = []
        var p99: [String: Double] = [:]
        for (mode, frozen, backpressure) in [("normal", false, Beacon.Backpressure.dropNewest), ("frozen", true, .dropNewest),
                                             ("frozen_block100ms", true, .blockCallingThread(timeout: .milliseconds(100)))] {
            var config = Beacon.Configuration(directory: try context.scratch("beacon-stall-\(mode)"))
            config.lifecycleEvents = false
            config.storage.maxBytes = 4 << 30
            config.backpressure = backpressure
            config.diagnostics = { _ in }
            let beacon = try Beacon(configuration: config)
            if frozen {
                // The stall has lasted long enough to fill the hand-off (8 MiB): measure from there.
                beacon.setWriterFrozen(true)
                var i = 0
                while beacon.stats.droppedTotal == 0 {
                    beacon.track("Request", properties: ["route": "/track", "tracker": -1, "i": .int(i)])
                    i += 1
                }
            }
            let latencies = blockOn { await probe(beacon, seconds: seconds) }
            let stats = beacon.stats
            beacon.setWriterFrozen(false)
            beacon.closeNow()
            let p50 = percentile(latencies, 0.50), p = percentile(latencies, 0.99)
            p99[mode] = p
            let fields = [("probes", String(latencies.count)), ("tracked", String(stats.tracked)), ("dropped", String(stats.droppedTotal))]
            figures.append(.value("beacon", "stall", "probe_p50_ms_\(mode)", p50, fields: fields))
            figures.append(.value("beacon", "stall", "probe_p99_ms_\(mode)", p, fields: fields))
        }
        if let normal = p99["normal"], let frozen = p99["frozen"], normal > 0 {
            figures.append(.value("beacon", "stall", "p99_frozen_over_normal", frozen / normal))
        }
        return figures
    }

    /// The probe's latencies in milliseconds, sorted, over `seconds` of tracking.
    static func probe(_ beacon: Beacon, seconds: Double) async -> [Double] {
        let stop = Flag()
        return await withTaskGroup(of: [Double].self) { group in
            for t in 0..<4 {
                group.addTask {
                    var i = 0
                    while !stop.value.load(ordering: .relaxed) {
                        beacon.track("Request", properties: ["route": "/track", "tracker": .int(t), "i": .int(i)])
                        i += 1
                        await Task.yield()
                    }
                    return []
                }
            }
            group.addTask {
                var samples: [Double] = []
                let end = ContinuousClock.now + .milliseconds(Int64(seconds * 1000))
                while ContinuousClock.now < end {
                    // A request arrives at `due`: it waits for a pool thread to wake the probe,
                    // and for one to run its handler (a child task).
                    let due = ContinuousClock.now + .milliseconds(2)
                    try? await Task.sleep(until: due, tolerance: .zero)
                    await withTaskGroup(of: Void.self) { route in
                        route.addTask {}
                        await route.waitForAll()
                    }
                    let elapsed = due.duration(to: .now)
                    samples.append(Double(elapsed.components.seconds) * 1e3 + Double(elapsed.components.attoseconds) / 1e15)
                }
                stop.value.store(true, ordering: .relaxed)
                return samples
            }
            var all: [Double] = []
            for await samples in group { all += samples }
            return all.sorted()
        }
    }

    static func percentile(_ sorted: [Double], _ p: Double) -> Double {
        guard !sorted.isEmpty else { return 0 }
        return sorted[min(sorted.count - 1, Int((Double(sorted.count) * p).rounded(.down)))]
    }
}

/// A flag the probe's tasks share.
final class Flag: Sendable {
    let value = Atomic<Bool>(false)
}
