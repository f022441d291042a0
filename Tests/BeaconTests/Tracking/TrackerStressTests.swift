import Foundation
import Glibc
import Synchronization
import Testing
@testable import Beacon
import BeaconLog
import BeaconTestSupport

/// Runs `body(index)` on `count` threads started together, and waits for all of them.
func onThreads(_ count: Int, _ body: @escaping @Sendable (Int) -> Void) {
    let group = DispatchGroup()
    for index in 0..<count {
        group.enter()
        let thread = Thread {
            body(index)
            group.leave()
        }
        thread.start()
    }
    group.wait()
}

@Suite struct TrackerStressTests {
    @Test func concurrentTrackKeepsPerThreadOrderAndLosesNothing() async throws {
        try await withTrackerDirectoryOffPool { dir in
            var config = Beacon.Configuration.testing(dir)
            config.storage.segmentBytes = 256 * 1024
            let beacon = try Beacon(configuration: config)
            let threads = 8
            let perThread = 3000
            onThreads(threads) { t in
                for i in 0..<perThread { beacon.track("Step", properties: ["thread": .int(t), "i": .int(i)]) }
            }
            let records = try events(of: beacon)
            #expect(records.count == threads * perThread)
            var next = [Int](repeating: 0, count: threads)
            var interleaved = false
            var previousThread = -1
            for record in records {
                let properties = try #require(record["properties"] as? [String: Any])
                let t = try #require(properties["thread"] as? Int)
                let i = try #require(properties["i"] as? Int)
                #expect(i == next[t], "thread \(t): \(i) after \(next[t] - 1)")
                next[t] = i + 1
                if previousThread != -1 && previousThread != t && next[previousThread] < perThread { interleaved = true }
                previousThread = t
            }
            #expect(next == [Int](repeating: perThread, count: threads))
            let stats = beacon.stats
            #expect(stats.tracked == UInt64(threads * perThread))
            #expect(stats.durable == UInt64(threads * perThread))
            #expect(stats.pending == 0 && stats.droppedTotal == 0)
            _ = interleaved   // interleaving depends on the scheduler; order must hold either way
            beacon.closeNow()
        }
    }

    @Test(arguments: [Beacon.Backpressure.dropNewest, .blockCallingThread(timeout: .zero)])
    func backpressureDropsAreCounted(_ policy: Beacon.Backpressure) async throws {
        try await withTrackerDirectoryOffPool { dir in
            var config = Beacon.Configuration.testing(dir)
            config.handoffBytes = 1                    // room for one queued record
            config.storage.durability = .everyRecord           // a slow writer: one fsync per batch
            config.backpressure = policy
            let diagnostics = DiagnosticsCollector()
            config.diagnostics = diagnostics.handler()
            let beacon = try Beacon(configuration: config)
            let count = 800
            for i in 0..<count { beacon.track("Burst", properties: ["i": .int(i)]) }
            let records = try events(of: beacon)
            let stats = beacon.stats
            let reason: DropReason = policy == .dropNewest ? .backpressure : .backpressureTimeout
            let dropped = stats.dropped[reason] ?? 0
            #expect(dropped > 0)
            #expect(stats.dropped.count == 1)
            #expect(UInt64(records.count) + dropped == UInt64(count))
            #expect(stats.tracked == UInt64(count))
            let kept = records.compactMap { ($0["properties"] as? [String: Any])?["i"] as? Int }
            #expect(kept == kept.sorted())
            #expect(diagnostics.all.contains { $0.kind == .dropped && $0.message.contains(reason.name) })
            beacon.closeNow()
        }
    }

    @Test func blockingBackpressureWaitsInsteadOfDropping() async throws {
        try await withTrackerDirectoryOffPool { dir in
            var config = Beacon.Configuration.testing(dir)
            config.handoffBytes = 1
            config.storage.durability = .everyRecord
            config.backpressure = .blockCallingThread(timeout: .seconds(30))
            let beacon = try Beacon(configuration: config)
            onThreads(2) { t in
                for i in 0..<150 { beacon.track("Burst", properties: ["t": .int(t), "i": .int(i)]) }
            }
            #expect(try events(of: beacon).count == 300)
            #expect(beacon.stats.droppedTotal == 0)
            beacon.closeNow()
        }
    }

    /// `sync()` waits for what was tracked before it, not for an idle writer: a thread that
    /// never stops tracking cannot keep it waiting.
    @Test func syncReturnsWhileAnotherThreadKeepsTracking() async throws {
        try await withTrackerDirectoryOffPool { dir in
            var config = Beacon.Configuration.testing(dir)
            config.handoffBytes = 64 * 1024          // a small backlog: each sync waits for little
            config.backpressure = .blockCallingThread(timeout: .seconds(60))   // the busy thread fills it: wait, never drop
            let beacon = try Beacon(configuration: config)
            let stop = Atomic<Bool>(false)
            let finished = Atomic<Bool>(false)
            let done = DispatchSemaphore(value: 0)
            Thread {
                var i = 0
                // Bounded so that a sync that waits for an idle writer fails instead of hanging.
                while !stop.load(ordering: .relaxed) && i < 1_000_000 {
                    beacon.track("Busy", properties: ["i": .int(i)])
                    i += 1
                }
                finished.store(true, ordering: .relaxed)
                done.signal()
            }.start()
            #expect(eventually(within: 60) { beacon.stats.tracked >= 100 }, "the busy thread did not start tracking")
            for round in 0..<5 {
                beacon.track("Mine", properties: ["round": .int(round)])
                try beacon.sync()
            }
            let busyStillRunning = !finished.load(ordering: .relaxed)
            #expect(busyStillRunning, "sync() returned only once the other thread stopped tracking")
            stop.store(true, ordering: .relaxed)
            done.wait()
            try beacon.sync()
            #expect(beacon.stats.droppedTotal == 0)
            let mine = try readEventsWhileOpenRaw(beacon).filter { String(decoding: $0, as: UTF8.self).contains(#""event":"Mine""#) }
            #expect(mine.count == 5)
            beacon.closeNow()
        }
    }

    /// A backlog larger than one append call is handed to the log in order, in several calls.
    @Test func aLargeBacklogIsAppendedInOrderInSeveralCalls() async throws {
        try await withTrackerDirectoryOffPool { dir in
            var config = BeaconLog.Configuration(directory: dir)
            config.durability = .everyRecord
            let log = try BeaconLog(configuration: config)
            let calls = Mutex(0)
            let writer = EventWriter(log: log, capacity: 1 << 20, backpressure: .blockCallingThread(timeout: .seconds(30)), recordsPerAppend: 7,
                                     hooks: .init(onAppended: { _ in calls.withLock { $0 += 1 } }, onFailure: { _, _, _ in }))
            for i in 0..<1000 { #expect(writer.enqueue(Array(#"{"i":\#(i)}"#.utf8)).isQueued) }
            writer.close()
            let batch = try log.read(maxRecords: 2000)
            #expect(batch.records.map { String(decoding: $0, as: UTF8.self) } == (0..<1000).map { #"{"i":\#($0)}"# })
            #expect(calls.withLock { $0 } >= 1000 / 7)
            #expect(writer.enqueue([0x7B, 0x7D]).isQueued == false)
            try log.close()
        }
    }

    /// kill -9 of a child that tracks numbered events, at random moments: the log recovers clean,
    /// and holds a contiguous prefix 0..<k of the events, in order.
    @Test(arguments: [15, 60, 150, 400])
    func killNineLeavesAValidLogWithAContiguousPrefix(_ delayMilliseconds: Int) async throws {
        let child = try childExecutablePath()
        try await withTrackerDirectoryOffPool { dir in
            let process = try SpawnedProcess(child, ["track", dir, "400000"], stdout: .pipe)
            var ready = [UInt8](repeating: 0, count: 64)
            let n = read(process.output, &ready, ready.count)
            #expect(String(decoding: ready.prefix(max(n, 0)), as: UTF8.self).hasPrefix("ready"))
            usleep(useconds_t(delayMilliseconds * 1000))
            process.signal(SIGKILL)
            #expect(process.wait() == .signalled(SIGKILL))

            // Recovery (what the next tracker does on open), then a clean verify.
            try BeaconLog(directory: dir).close()
            let report = try BeaconLog.verify(directory: dir)
            #expect(report.isClean, "\(report.problems)")
            let numbers = try readObjects(dir).map { ($0["properties"] as? [String: Any])?["n"] as? Int }
            #expect(numbers == Array(0..<numbers.count).map(Optional.some))
            // The next tracker opens the recovered directory and appends after the prefix.
            let beacon = try Beacon(configuration: .testing(dir))
            beacon.track("AfterCrash")
            beacon.closeNow()
            #expect(try readObjects(dir).count == numbers.count + 1)
        }
    }
}
