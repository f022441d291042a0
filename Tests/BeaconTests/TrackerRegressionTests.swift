import Foundation
import Synchronization
import Testing
@testable import Beacon

/// Found in review; each failed before its fix.
@Suite struct TrackerRegressionTests {
    /// Two threads closing at once: the second waits for the first, so nothing tracked before the
    /// close is refused by a log closed under the draining writer.
    @Test func concurrentClosesLoseNothing() async throws {
        for round in 0..<10 {
            try await withTrackerDirectoryOffPool { dir in
                var config = Beacon.Configuration.testing(dir)
                config.durability = .everyRecord
                let beacon = try Beacon(configuration: config)
                let stop = Atomic<Bool>(false)
                let group = DispatchGroup()
                group.enter()
                Thread {
                    var i = 0
                    while !stop.load(ordering: .relaxed) {
                        beacon.track("E", properties: ["n": .int(i), "pad": .string(String(repeating: "x", count: 500))])
                        i += 1
                    }
                    group.leave()
                }.start()
                usleep(20_000)
                for _ in 0..<2 {
                    group.enter()
                    Thread { beacon.closeNow(); group.leave() }.start()
                }
                usleep(20_000)
                stop.store(true, ordering: .relaxed)
                group.wait()
                let stats = beacon.stats
                var readOnly = BeaconLog.Configuration(directory: dir)
                readOnly.access = .readOnly
                let onDisk = try BeaconLog(configuration: readOnly).stats.pendingRecords
                #expect(onDisk + stats.dropped["closed", default: 0] == stats.tracked,
                        "round \(round): tracked \(stats.tracked), on disk \(onDisk), dropped \(stats.dropped)")
            }
        }
    }

    /// `run()` returns when the tracker is closed with `close()`, not only with `shutdown()`.
    @Test func runReturnsAfterClose() async throws {
        try await withTrackerDirectory { dir in
            let beacon = try Beacon(configuration: .testing(dir))
            let returned = Atomic<Bool>(false)
            let running = Task {
                try await beacon.run()
                returned.store(true, ordering: .relaxed)
            }
            try await Task.sleep(for: .milliseconds(100))
            await beacon.close()
            let didReturn = await eventually(5) { returned.load(ordering: .relaxed) }
            #expect(didReturn, "run() still waiting after close()")
            running.cancel()
            _ = try? await running.value
        }
    }

    /// `durable + pending` never exceeds what was tracked, even while a batch is being written.
    @Test func statsNeverCountARecordTwice() async throws {
        try await withTrackerDirectoryOffPool { dir in
            var config = Beacon.Configuration.testing(dir)
            config.durability = .everyRecord
            let beacon = try Beacon(configuration: config)
            let stop = Atomic<Bool>(false)
            let group = DispatchGroup()
            group.enter()
            Thread {
                var i = 0
                while !stop.load(ordering: .relaxed) {
                    beacon.track("E", properties: ["n": .int(i)])
                    i += 1
                    if i % 50 == 0 { usleep(200) }
                }
                group.leave()
            }.start()
            var worst: (tracked: UInt64, durable: UInt64, pending: UInt64)?
            for _ in 0..<20_000 {
                let s = beacon.stats
                if s.durable + s.pending > s.tracked, worst == nil { worst = (s.tracked, s.durable, s.pending) }
            }
            stop.store(true, ordering: .relaxed)
            group.wait()
            beacon.closeNow()
            #expect(worst == nil, "tracked, durable, pending = \(String(describing: worst))")
            let final = beacon.stats
            #expect(final.pending == 0 && final.durable == final.tracked, "\(final)")
        }
    }
}
