import Foundation
import Glibc
import Testing
@testable import BeaconLog
import BeaconTestSupport
import FaultInjection
import BeaconTestTraits

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

    /// A burst's grown buffer is mapped and unmapped by the buffer itself: freeing it leaves glibc's
    /// mmap threshold where it was, so that later large blocks (of this process, the service's
    /// too) are still mapped and given back when freed, not kept in the malloc arenas. In a
    /// fresh process (`beacon-test-child burst`), where nothing else moved the threshold. Fails on
    /// the code before (the 2.5 MiB buffer came from `malloc`, and its `free` raised the threshold
    /// to 2.5 MiB: the 1 MiB block came from the heap).
    @Test("a burst's 2.5 MiB buffer leaves glibc's mmap threshold as it was", .blocking)
    func aBurstLeavesTheMmapThreshold() throws {
        try expectThresholdUnmoved(["burst"], after: "the burst", "a 1 MiB block came from the heap after the burst: the burst's buffer raised glibc's mmap threshold")
    }

    /// Runs `beacon-test-child ROLE DIR ARGS...` (`role[0]`, a temporary directory, the rest) and
    /// expects it to print `baseline mapped` then `after mapped` (see BurstChild.swift).
    func expectThresholdUnmoved(_ role: [String], after what: String, _ failure: Comment) throws {
        try withTemporaryDirectory { dir in
            let child = try ChildProcess([role[0], dir] + role.dropFirst())
            defer { child.kill9() }
            let baseline = try child.waitForLine { $0.hasPrefix("baseline ") }
            // Under a sanitizer `malloc` is the sanitizer's allocator, which has no mmap threshold
            // (`.ci/run`'s AddressSanitizer suite): nothing to check there.
            if baseline != "baseline mapped" && runsUnderSanitizer { return }
            try #require(baseline == "baseline mapped", "the threshold had moved before \(what): nothing to check")
            let after = try child.waitForLine { $0.hasPrefix("after ") }
            #expect(after == "after mapped", failure)
            #expect(child.waitForExit() == 0)
        }
    }

    /// The reader's read-ahead leaves glibc's mmap threshold where it was too: a reader refills it
    /// every few batches, and each block it frees would otherwise raise the threshold to its size.
    /// In a fresh process (`beacon-test-child burst DIR read`). Fails on the code before (a 256 KiB
    /// read-ahead from `malloc`, mapped, raised the threshold past it: the 200 KiB block came from
    /// the heap).
    @Test("reading 3,000 records back leaves glibc's mmap threshold as it was", .blocking)
    func readingLeavesTheMmapThreshold() throws {
        try expectThresholdUnmoved(["burst", "read"], after: "the reads", "a 200 KiB block came from the heap after the reads: the read-ahead's blocks raised glibc's mmap threshold")
    }

    /// A read's per-record arrays grow by doubling but never past `maxRecords` (with room for
    /// `malloc`'s rounding): a read of at most 4,000 records keeps its 32-byte slices under glibc's
    /// mmap threshold (128 KiB), where an array doubled to 4,096 was 32 bytes over it: mapped, and
    /// its `free` raised the threshold. Fails on the code before (capacities of 4,096 for 2,049 to
    /// 4,000 records).
    @Test("a read's arrays hold no more than maxRecords", arguments: [1, 50, 64, 65, 1000, 2049, 4000])
    func readArraysStopAtMaxRecords(maxRecords: Int) throws {
        try withTemporaryDirectory { dir in
            let log = try BeaconLog(configuration: smallConfig(dir, durability: .none, segmentBytes: 8 << 20, maxBytes: 64 << 20))
            defer { try? log.close() }
            try log.append(contentsOf: (0..<4500).map { Array(numbered($0).utf8) })
            try log.sync()
            let batch = try log.read(maxRecords: maxRecords, maxBytes: 64 << 20)
            #expect(batch.count == maxRecords)
            #expect(batch.records.capacity <= maxRecords + 16, "\(maxRecords) records in an array of capacity \(batch.records.capacity)")
        }
    }

    @Test("buffers from 128 KiB up are mapped, smaller ones come from malloc; growing keeps the bytes", arguments: [64, 80 * 1024, 128 * 1024 - 1, 128 * 1024, 3 << 20])
    func largeBuffersAreMapped(capacity: Int) {
        let buffer = FrameBuffer(capacity: capacity)
        #expect(buffer.isMapped == (capacity >= FrameBuffer.mappedMinimum))
        // Regions of one byte value each (memset), checked with memcmp: cheap in a debug build.
        var regions: [(offset: Int, count: Int, value: UInt8)] = []
        var i = 0
        while buffer.count < 4 << 20 {
            let n = 1000 + (i * 7919) % 60_000
            let value = UInt8(truncatingIfNeeded: i &* 31 &+ 1)
            memset(buffer.tail(reserving: n), Int32(value), n)
            regions.append((buffer.count, n, value))
            buffer.count += n
            #expect(buffer.isMapped == (buffer.capacity >= FrameBuffer.mappedMinimum))
            i += 1
        }
        let reference = UnsafeMutableRawPointer.allocate(byteCount: 64 * 1024, alignment: 16)
        defer { reference.deallocate() }
        for region in regions {
            memset(reference, Int32(region.value), region.count)
            #expect(memcmp(buffer.bytes.baseAddress! + region.offset, reference, region.count) == 0, "bytes at \(region.offset) changed")
        }
    }
}
