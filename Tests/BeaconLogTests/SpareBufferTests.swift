import Foundation
import Testing
@testable import BeaconLog
import BeaconTestSupport
import FaultInjection

/// The chunk buffers the log keeps for reuse after a commit: a buffer that grew for a large
/// commit is freed, not held for the process's lifetime (issue 29: a burst of a few thousand
/// records left a megabyte or more of spare buffers in a service's memory for good).
@Suite struct SpareBufferTests {
    /// Records of about 300 bytes, as a tracked event.
    func record(_ i: Int) -> [UInt8] { Array(numbered(i, pad: 280).utf8) }

    /// After commits of every size from one record to a burst that grows the chunk buffer to a
    /// megabyte, under each durability mode: the spare buffers are of the usual size only, and
    /// under `.everyRecord` and `.batched` at most `committedSpareBuffers` of them.
    @Test(arguments: [BeaconLog.Durability.everyRecord, .batched(records: 100, interval: .milliseconds(10)), .none])
    func grownBuffersAreNotKept(durability: BeaconLog.Durability) throws {
        try withTemporaryDirectory { dir in
            var config = smallConfig(dir, durability: durability, segmentBytes: 8 << 20, maxBytes: 64 << 20)
            let fs = FaultyFileSystem()
            fs.skipSyncs = true
            config.fileSystem = fs
            let log = try BeaconLog(configuration: config)
            defer { try? log.close() }
            var next = 0
            for burst in [1, 10, 300, 1000, 4000, 1, 4000, 2] {
                try log.appendCommittingNow(contentsOf: (next..<next + burst).map(record))
                next += burst
                if durability == .none { try log.sync() }
                let (spare, spareBytes) = log.state.withLock { s in (s.spare.map(\.capacity), s.spareBytes) }
                #expect(spare.allSatisfy { $0 <= log.chunkCapacity }, "after a commit of \(burst): spare capacities \(spare)")
                #expect(spareBytes == spare.reduce(0, +))
                if durability != .none {
                    #expect(spareBytes <= BeaconLog.committedSpareBuffers * log.chunkCapacity, "after a commit of \(burst): \(spareBytes) spare bytes")
                }
            }
            #expect(log.stats.durableRecords == UInt64(next))
        }
    }
}
