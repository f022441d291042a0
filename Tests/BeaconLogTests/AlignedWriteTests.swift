import Foundation
import Glibc
import Synchronization
import Testing
@testable import BeaconLog
import FaultInjection

/// Under `.none` a full buffer is written up to a multiple of 64 KiB of the segment (the page
/// cache takes such writes in whole large folios); the bytes past it, usually the start of one
/// frame, stay buffered. Readers still see whole frames only; crashes leave what any write does.
@Suite struct AlignedWriteTests {
    static let alignment = 64 * 1024

    /// Records of 150 to 260 bytes, so frames end at every offset.
    func record(_ i: Int) -> String { numbered(i, pad: 120 + (i * 37) % 111) }

    /// A `.none` log on `fs` with one big segment (no roll: every write but the first continues it).
    func configured(_ dir: String, _ fs: FaultyFileSystem, access: BeaconLog.Access = .readWrite, segmentBytes: Int = 8 << 20) -> BeaconLog.Configuration {
        var config = smallConfig(dir, durability: .none, segmentBytes: segmentBytes, maxBytes: 64 << 20)
        config.fileSystem = fs
        config.access = access
        return config
    }

    @Test("the appender's writes of a full buffer end at multiples of 64 KiB; readers in this and another instance see every record once, none corrupt")
    func fullBuffersEndAligned() throws {
        try withTemporaryDirectory { dir in
            let fs = FaultyFileSystem()
            fs.skipSyncs = true
            // Which writes the appending thread made (the 10 ms flush writes from its own queue,
            // as far as the buffer goes, wherever that ends).
            let appender = pthread_self()
            let byAppender = Mutex<[Bool]>([])
            fs.beforeCall = { operation, path in
                if operation == .write, path.hasSuffix(".jsonl") { byAppender.withLock { $0.append(pthread_equal(pthread_self(), appender) != 0) } }
            }
            let log = try BeaconLog(configuration: configured(dir, fs, access: .write))
            let reader = try BeaconLog(configuration: configured(dir, FaultyFileSystem(), access: .read))
            // About 1.8 MB (27 full buffers) at least; more while the appender has made few
            // writes of its own: on a slow run (the suite under AddressSanitizer) the 10 ms flush
            // writes most buffers before they fill, and only 2 consecutive appender writes came
            // in 9,000 records.
            // The check below needs pairs of consecutive appender writes (from the third write
            // on), not just appender writes: the fresh-clone AddressSanitizer run had 8 of them
            // but no such pair. Counted every 500 records.
            var count = 0
            var seen: [UInt64] = []
            var cursor: LogPosition?
            var enoughPairs = false
            while count < 9000 || (!enoughPairs && count < 300_000) {
                let i = count
                count += 1
                if count % 500 == 0 {
                    enoughPairs = byAppender.withLock { flags in flags.count > 2 && (2..<flags.count).filter { flags[$0] && flags[$0 - 1] }.count >= 4 }
                }
                try log.append(record(i))
                if i % 701 == 700 {
                    let batch = try reader.read(from: cursor, maxRecords: 10_000)
                    #expect(batch.skippedCorrupt == 0, "after \(i)")
                    seen += batch.seqs
                    if !batch.isEmpty { cursor = batch.end }
                }
            }
            let writes = fs.journal.filter { $0.operation == .write && $0.path.hasSuffix(".jsonl") && !$0.failed }
            let flags = byAppender.withLock { $0 }
            fs.beforeCall = nil
            try log.sync()
            var end = 0
            var checked = 0
            for (k, write) in writes.enumerated() {
                end += write.bytes
                // After an aligned write, the appender's next one ends aligned too. (The first
                // write, and one after the flush's, may find the boundary inside the buffer's
                // first frame: they write it all and the next one aligns.)
                guard k >= 2, k < flags.count, flags[k], flags[k - 1] else { continue }
                checked += 1
                #expect(end % Self.alignment == 0, "write \(k) of \(write.bytes) bytes ends at \(end)")
            }
            #expect(checked >= 3, "only \(checked) writes by the appender")
            // Everything, in order: what the other instance read along, and a reopened log.
            seen += try reader.read(from: cursor, maxRecords: 20_000).seqs
            #expect(seen == Array(0..<UInt64(count)))
            #expect(reader.stats.skippedCorrupt == 0)
            try reader.close()
            try log.close()
            let reopened = try BeaconLog(configuration: configured(dir, FaultyFileSystem()))
            let all = try readAll(reopened, batchSize: 4096)
            #expect(all.seqs == Array(0..<UInt64(count)))
            #expect(all.records == (0..<count).map(record))
            #expect(all.skipped == 0)
            try reopened.close()
            try expectClean(dir)
        }
    }

    @Test("a write of a full buffer that fails (disk full) after an aligned one: the records are kept and written once, in order")
    func failedWriteAfterAnAlignedOne() throws {
        try withTemporaryDirectory { dir in
            let fs = FaultyFileSystem()
            fs.skipSyncs = true
            let log = try BeaconLog(configuration: configured(dir, fs, segmentBytes: 1 << 20))
            // The third write of the segment fails; the fourth is cut short by the space left.
            fs.inject(.write, errno: ENOSPC, path: ".jsonl", onCall: 3, times: 1)
            var kept: Set<UInt64> = []
            for i in 0..<6000 {
                do {
                    try log.append(record(i))
                } catch let error as BeaconLogError {
                    #expect(error.code == .diskFull)
                    kept.formUnion(error.keptSeqs.map(Array.init) ?? [])
                }
                if i == 2500 { fs.spaceLeft = 70_000 }
                if i == 3000 { fs.spaceLeft = nil }
            }
            // The appender or the 10 ms flush met the failures (the flush retries on its own).
            #expect(fs.journal.filter { $0.operation == .write && $0.failed }.count >= 1, "the disk-full path was taken")
            #expect(kept.isSubset(of: Set(0..<6000)))
            try log.sync()
            try log.close()
            let reopened = try BeaconLog(configuration: configured(dir, FaultyFileSystem()))
            let all = try readAll(reopened, batchSize: 4096)
            #expect(all.seqs == Array(0..<6000))
            #expect(all.records == (0..<6000).map(record))
            #expect(all.skipped == 0)
            try reopened.close()
            try expectClean(dir)
        }
    }

    static let workloads: [CrashStateTests.Workload] = [
        CrashStateTests.Workload(name: "none: full buffers written to 64 KiB boundaries across a roll, a sync, a close", durability: .none, maxBytes: 8 << 20, segmentBytes: 140 * 1024) { open, script in
            var log = try open()
            for i in 0..<1400 { try script.append(log, i) }
            try script.sync(log)
            for i in 1400..<1700 { try script.append(log, i) }
            try script.close(log)
            log = try open()
            for i in 1700..<1900 { try script.append(log, i) }
            try script.close(log)
        },
    ]

    @Test("crash states of aligned writes: gap-free FIFO, durable records kept, a frame cut at the boundary never read", arguments: workloads)
    func crashStates(workload: CrashStateTests.Workload) throws {
        try CrashStateTests.expectCleanCrashStates(workload)
    }
}
