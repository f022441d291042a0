import Foundation
import Testing
@testable import BeaconLog

/// Inputs the fuzz targets (Tests/Fuzz/, `Benchmarks/fuzz.sh`) found, kept as ordinary tests: segment
/// files and checkpoints with bytes Beacon did not write.
@Suite struct FuzzRegressionTests {
    /// Writes segment `number` of `dir` with these frames and raw bytes.
    func writeSegment(_ dir: String, _ number: UInt64, _ bytes: [UInt8]) throws {
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        #expect(FileManager.default.createFile(atPath: dir + "/" + SegmentName.fileName(number), contents: Data(bytes)))
    }

    func frames(_ seqs: [UInt64]) -> [UInt8] {
        seqs.flatMap { Frame.encode(seq: $0, record: Array(#"{"n":\#($0)}"#.utf8)) }
    }

    /// FuzzSegments: the newest segment held seqs 0–3 and then a record with seq 2 (a copy of an
    /// older segment, then damage). Opening took the last record's seq, 2, as the end of the log,
    /// so the batch that read seq 3 could never be acknowledged ("the log ends at seq 3"): the
    /// reader was stuck there for good, and the next append reused seq 3.
    @Test func newestSegmentWhoseSeqsGoBack() throws {
        try withTemporaryDirectory { dir in
            try writeSegment(dir, 0, frames([0, 1]))
            try writeSegment(dir, 1, frames([0, 1, 2, 3, 2]))
            let log = try BeaconLog(configuration: smallConfig(dir))
            #expect(log.stats.nextSeq == 4)
            let batch = try log.read(maxRecords: 100)
            #expect(batch.seqs == [0, 1, 2, 3])
            try log.acknowledge(through: batch.end)
            #expect(try log.append("{}") == 4)
            try log.sync()
            let after = try log.read()
            #expect(after.seqs == [4])
            try log.acknowledge(through: after.end)
            try log.close()
            try expectClean(dir)
        }
    }
}

extension FuzzRegressionTests {
    /// FuzzSegments: an older segment held a valid record whose seq (5) lies past the log's end
    /// (5, from the newest segments; opening does not scan the older ones), then seq 2. Reading
    /// returned seq 5 and passed over the rest as copies, and the batch's end (seq 6) could never
    /// be acknowledged: delivery was stuck there for good. A seq past the end is damaged digits
    /// (the CRC does not cover them): passed over and counted, and the records after it are read.
    @Test func olderSegmentWithASeqPastTheEnd() throws {
        try withTemporaryDirectory { dir in
            try writeSegment(dir, 0, frames([5, 2]))
            try writeSegment(dir, 1, frames([3]))
            try writeSegment(dir, 2, frames([4]))
            let log = try BeaconLog(configuration: smallConfig(dir))
            #expect(log.stats.nextSeq == 5)
            let batch = try log.read(maxRecords: 100)
            #expect(batch.seqs == [2, 3, 4])
            #expect(batch.skippedCorrupt == 1)
            try log.acknowledge(through: batch.end)
            #expect(try log.append("{}") == 5)
            try log.close()
        }
    }
}

extension FuzzRegressionTests {
    /// FuzzSegments: the newest segment held only a copy of seq 1 among garbage (a rewrite after a
    /// failed fsync, then torn), the older one seqs 0–2. Opening took seq 2 as the log's end, so
    /// record 2 looked past the end. The previous segment's tail now counts for the end too.
    @Test func tornRewriteBelowThePreviousSegmentsEnd() throws {
        try withTemporaryDirectory { dir in
            try writeSegment(dir, 0, frames([0, 1, 2]))
            try writeSegment(dir, 1, Array("garbage\n".utf8) + frames([1]) + Array(#"{"seq":2,"crc":1,"ev"#.utf8))
            let log = try BeaconLog(configuration: smallConfig(dir))
            #expect(log.stats.nextSeq == 3)
            let batch = try log.read(maxRecords: 100)
            #expect(batch.seqs == [0, 1, 2])
            try log.acknowledge(through: batch.end)
            #expect(try log.append("{}") == 3)
            try log.close()
        }
    }
}
