import Dispatch
import Foundation
import Synchronization
import Testing
import BeaconTestTraits
@testable import BeaconLog
import FaultInjection

/// The persisted loss counters: a save scheduled in the background and `close()`'s own save.
@Suite(.blocking) struct CounterSaveTests {
    /// A background save takes its snapshot, then is held just before it replaces
    /// `writer.counters`; meanwhile more records are dropped and `close()` saves the newer counts.
    /// Saves run one at a time, so the older snapshot can never replace the newer file: the
    /// reopened log counts every drop. (Without that, the background save, released after
    /// `close()`, wrote its older count last.)
    @Test func aBackgroundSaveNeverWritesOlderCountsOverClose() throws {
        try withTemporaryDirectory { dir in
            let config = fastConfig(dir, durability: .everyRecord, segmentBytes: 4096, maxBytes: 3 * 4096)
            let fs = try #require(config.fileSystem as? FaultyFileSystem)
            let held = DispatchSemaphore(value: 0)
            let release = DispatchSemaphore(value: 0)
            let removes = Atomic(0)
            fs.beforeCall = { operation, path in
                // The first step of the first save that replaces writer.counters.
                guard operation == .remove, path.hasSuffix("/writer.counters.tmp") else { return }
                guard removes.add(1, ordering: .sequentiallyConsistent).newValue == 1 else { return }
                held.signal()
                // Bounded: with saves serialised, close() waits for this save, so nobody
                // releases it until the wait ends.
                _ = release.wait(timeout: .now() + .seconds(2))
            }
            let log = try BeaconLog(configuration: config)
            for i in 0..<300 { try log.append(numbered(i, pad: 40)) }
            #expect(log.stats.dropped[.quotaDeleted, default: 0] > 0)
            // The background save starts a second after the first drop; its poll bound only
            // matters under load.
            #expect(held.wait(timeout: .now() + .seconds(30)) == .success, "no background save of the counters started")
            for i in 300..<600 { try log.append(numbered(i, pad: 40)) }
            let dropped = try #require(log.stats.dropped[.quotaDeleted])
            try log.close()
            release.signal()
            // Both saves have replaced writer.counters once each has gone on to reader.counters.
            #expect(eventually(within: 30) { fs.calls(.remove, path: "/reader.counters.tmp").count >= 2 })
            let reopened = try BeaconLog(configuration: config)
            #expect(reopened.stats.dropped[.quotaDeleted] == dropped)
            try reopened.close()
        }
    }
}
