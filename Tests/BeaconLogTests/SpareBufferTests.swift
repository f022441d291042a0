import Foundation
import Testing
@testable import BeaconLog
import BeaconTestSupport
import FaultInjection

/// The chunk buffers the log keeps for reuse after a commit: a buffer that grew for a large
/// commit is kept while bursts fill it and freed after the first commit that did not need it, not
/// held for the process's lifetime (issue 29: a burst of 4,000 records left a 2.5 MiB spare
/// buffer in a service's memory for good).
@Suite struct SpareBufferTests {
    /// Records of about 300 bytes, as a tracked event.
    func record(_ i: Int) -> [UInt8] { Array(numbered(i, pad: 280).utf8) }

    /// Bursts of every size from 300 records (a buffer grown twice) to 10,000 (to several
    /// megabytes), each followed by a commit of 1 to 3 records: under `.everyRecord` and `.batched`
    /// the spare buffers are then of the usual size only and at most `committedSpareBuffers`;
    /// under every mode every record is durable.
    @Test(arguments: [BeaconLog.Durability.everyRecord, .batched(records: 100, interval: .milliseconds(10)), .none])
    func grownBuffersAreFreedAfterTheBurst(durability: BeaconLog.Durability) throws {
        try withTemporaryDirectory { dir in
            var config = smallConfig(dir, durability: durability, segmentBytes: 8 << 20, maxBytes: 64 << 20)
            let fs = FaultyFileSystem()
            fs.skipSyncs = true
            config.fileSystem = fs
            let log = try BeaconLog(configuration: config)
            defer { try? log.close() }
            var next = 0
            func commit(_ count: Int) throws {
                try log.appendCommittingNow(contentsOf: (next..<next + count).map(record))
                next += count
                if durability == .none { try log.sync() }
            }
            for (burst, small) in [(300, 1), (1000, 2), (4000, 1), (4000, 3), (10_000, 1), (1, 1)] {
                try commit(burst)
                try commit(small)
                let (spare, spareBytes) = log.state.withLock { s in (s.spare.map(\.capacity), s.spareBytes) }
                #expect(spareBytes == spare.reduce(0, +))
                // Under `.none` the small commit may go on in the chunk held back from the burst's
                // aligned write, leaving a grown spare until a new chunk takes it.
                if durability != .none {
                    #expect(spare.allSatisfy { $0 <= log.chunkCapacity }, "after a burst of \(burst) and a commit of \(small): spare capacities \(spare)")
                    #expect(spareBytes <= BeaconLog.committedSpareBuffers * log.chunkCapacity, "after a burst of \(burst) and a commit of \(small): \(spareBytes) spare bytes")
                }
            }
            #expect(log.stats.durableRecords == UInt64(next))
        }
    }
}
