import Foundation
import Testing
@testable import BeaconLog

/// Regressions found while building the suite: each failed before its fix.
@Suite struct LeadRegressionTests {
    func config(_ dir: String) -> BeaconLog.Configuration {
        var c = BeaconLog.Configuration(directory: dir)
        c.segmentBytes = 4096
        c.maxBytes = 1 << 20
        c.durability = .none
        return c
    }

    func segmentFiles(_ dir: String) throws -> [String] {
        try FileManager.default.contentsOfDirectory(atPath: dir).filter { $0.hasSuffix(".jsonl") }.sorted()
    }

    /// Acknowledging exactly the end of a sealed segment deletes it; reopening must not fall back.
    @Test(arguments: [1, 2, 3])
    func acknowledgeToTheEndOfASealedSegmentSurvivesReopen(segmentsAcked: Int) throws {
        try withTemporaryDirectory { dir in
            let total: UInt64
            let acked: UInt64
            do {
                let log = try BeaconLog(configuration: config(dir))
                for i in 0..<400 { try log.append(#"{"n":\#(i),"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}"#) }
                try log.sync()
                // Read segment by segment: a batch that stops at a segment's end.
                var end = log.checkpoint
                var count: UInt64 = 0
                for _ in 0..<segmentsAcked {
                    var cursor = end
                    let startSegment = cursor.segment
                    while true {
                        let b = try log.read(from: cursor, maxRecords: 1)
                        if b.isEmpty || b.end.segment != startSegment && b.start.segment != startSegment { break }
                        if b.end.segment != startSegment { break }
                        cursor = b.end
                        count += UInt64(b.count)
                        let size = try FileManager.default.attributesOfItem(atPath: dir + "/" + SegmentName.fileName(startSegment))[.size] as! UInt64
                        if cursor.offset == size { break }
                    }
                    end = cursor
                    try log.acknowledge(through: end)
                    #expect(log.stats.acknowledgedSeq == count - 1)
                    end = LogPosition(segment: end.segment + 1, offset: 0, seq: end.seq)
                }
                acked = count
                total = log.stats.nextSeq
                #expect(!(try segmentFiles(dir)).contains(SegmentName.fileName(0)))
                try log.close()
            }
            let log = try BeaconLog(configuration: config(dir))
            let stats = log.stats
            #expect(stats.checkpointRecovery == nil)
            #expect(stats.nextSeq == total)
            #expect(stats.pendingRecords == total - acked)
            #expect(stats.acknowledgedSeq == acked - 1)
            let first = try log.read(maxRecords: 1)
            #expect(first.firstSeq == acked)
            try log.close()
        }
    }

    /// The CRC covers the event, not its seq: a record whose seq digits changed is skipped and
    /// counted, and only that one, whether the seq went down or up.
    @Test(arguments: [("\"seq\":12,", "\"seq\":11,"), ("\"seq\":12,", "\"seq\":10,"), ("\"seq\":12,", "\"seq\":92,"), ("\"seq\":12,", "\"seq\":13,")])
    func damagedSeqDigitsSkipOnlyThatRecord(from: String, to: String) throws {
        try withTemporaryDirectory { dir in
            do {
                let log = try BeaconLog(configuration: config(dir))
                for i in 0..<30 { try log.append(#"{"n":\#(i)}"#) }
                try log.close()
            }
            let path = dir + "/" + SegmentName.fileName(0)
            let text = try String(contentsOfFile: path, encoding: .utf8)
            #expect(text.contains(from))
            try text.replacingOccurrences(of: from, with: to).write(toFile: path, atomically: false, encoding: .utf8)
            let log = try BeaconLog(configuration: config(dir))
            let batch = try log.read(maxRecords: 1000)
            let ns = batch.records.map { String(decoding: $0, as: UTF8.self) }
            #expect(ns == (0..<30).filter { $0 != 12 }.map { #"{"n":\#($0)}"# })
            #expect(batch.skippedCorrupt == 1)
            #expect(log.stats.skippedCorrupt == 1)
            try log.close()
        }
    }

    /// A frame that ends exactly at segmentBytes stays in its segment; one byte more rolls.
    @Test(arguments: [0, 1])
    func aFrameThatFitsExactlyStaysInTheSegment(extra: Int) throws {
        try withTemporaryDirectory { dir in
            let log = try BeaconLog(configuration: config(dir))
            var used = 0
            var seq: UInt64 = 0
            let filler = Array(#"{"pad":"\#(String(repeating: "y", count: 100))"}"#.utf8)
            while used + 2 * Frame.length(seq: seq, crc: UInt32.max, count: filler.count) < 4096 {
                let crc = filler.withUnsafeBytes { CRC32C.checksum($0) }
                used += Frame.length(seq: seq, crc: crc, count: filler.count)
                try log.append(filler)
                seq += 1
            }
            // A record whose frame ends exactly at 4096 (+ extra).
            var size = 4096 - used + extra - 40
            var record: [UInt8] = []
            for _ in 0..<100 {
                record = Array(#"{"p":"\#(String(repeating: "z", count: size))"}"#.utf8)
                let crc = record.withUnsafeBytes { CRC32C.checksum($0) }
                let length = Frame.length(seq: seq, crc: crc, count: record.count)
                if used + length == 4096 + extra { break }
                size += 4096 + extra - used - length
            }
            try log.append(record)
            try log.sync()
            let files = try segmentFiles(dir)
            #expect(files.count == (extra == 0 ? 1 : 2))
            let first = try FileManager.default.attributesOfItem(atPath: dir + "/" + files[0])[.size] as! UInt64
            #expect(first == (extra == 0 ? 4096 : UInt64(used)))
            try log.close()
        }
    }
}

@Suite struct CRC32CInstructionTests {
    /// The CPU instruction and the table agree on every length and alignment, and on the check value.
    @Test func instructionMatchesTable() {
        var rng = SystemRandomNumberGenerator()
        let bytes = (0..<4096).map { _ in UInt8.random(in: 0...255, using: &rng) }
        bytes.withUnsafeBytes { raw in
            for start in 0..<9 {
                for count in Array(0...70) + [255, 1000, 4000] where start + count <= raw.count {
                    let slice = UnsafeRawBufferPointer(rebasing: raw[start..<(start + count)])
                    #expect(CRC32C.update(7, slice) == CRC32C.software(7, slice))
                }
            }
        }
        #expect(CRC32C.checksum(Array("123456789".utf8)) == 0xE306_9283)
    }
}

@Suite struct PersistedCounterTests {
    /// Drops, refusals and skipped records are still reported after a restart and to a read-only view.
    @Test func lossCountersSurviveReopen() throws {
        try withTemporaryDirectory { dir in
            var config = BeaconLog.Configuration(directory: dir)
            config.segmentBytes = 4096
            config.maxBytes = 8192
            config.durability = .none
            do {
                let log = try BeaconLog(configuration: config)
                for i in 0..<300 { try log.append(#"{"n":\#(i),"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}"#) }
                #expect(throws: BeaconLogError.self) { try log.append("") }
                #expect(throws: BeaconLogError.self) { try log.append("{\"a\":\n1}") }
                try log.close()
                let stats = log.stats
                #expect((stats.dropped["quota"] ?? 0) > 0)
                #expect(stats.refused["invalid"] == 2)
            }
            let dropped: UInt64
            do {
                let log = try BeaconLog(configuration: config)
                dropped = log.stats.dropped["quota"] ?? 0
                #expect(dropped > 0)
                #expect(log.stats.refused["invalid"] == 2)
                // Everything still there is delivered in order after the dropped prefix.
                let batch = try log.read(maxRecords: 1000)
                #expect(batch.firstSeq == dropped)
                #expect(batch.lastSeq == 299)
                try log.close()
            }
            var readOnly = BeaconLog.Configuration(directory: dir)
            readOnly.access = .readOnly
            let view = try BeaconLog(configuration: readOnly)
            #expect(view.stats.dropped["quota"] == dropped)
            #expect(view.stats.refused["invalid"] == 2)
            try view.close()
            let mode = try FileManager.default.attributesOfItem(atPath: dir + "/writer.counters")[.posixPermissions] as? Int
            #expect(mode == 0o600)
        }
    }
}

@Suite struct PartialAcknowledgeTests {
    /// Acknowledging through `end(after:)` of any record, across a roll, resumes exactly after it.
    @Test func acknowledgeAPrefixOfABatch() throws {
        try withTemporaryDirectory { dir in
            var config = BeaconLog.Configuration(directory: dir)
            config.segmentBytes = 4096
            let log = try BeaconLog(configuration: config)
            for i in 0..<200 { try log.append(#"{"n":\#(i),"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}"#) }
            var expected: UInt64 = 0
            for take in [1, 7, 30, 49, 13] {
                let batch = try log.read(maxRecords: 50)
                #expect(batch.firstSeq == expected)
                try log.acknowledge(through: batch.end(after: take - 1))
                expected += UInt64(take)
                #expect(log.stats.acknowledgedSeq == expected - 1)
            }
            try log.close()
            let again = try BeaconLog(configuration: config)
            #expect(try again.read(maxRecords: 1).firstSeq == expected)
            try again.close()
        }
    }
}

@Suite struct FrameEncodingTests {
    /// The hand-rolled decimal writer and digit counter match Swift's for every power-of-ten edge and random values.
    @Test func framesMatchTheTextFormat() {
        var values: [UInt64] = [0, 1, 9, 10, 11, 99, 100, 101, UInt64(UInt32.max), UInt64.max, UInt64.max - 1]
        var p: UInt64 = 1
        for _ in 0..<19 {
            p *= 10
            values += [p - 1, p, p + 1]
        }
        for _ in 0..<2000 { values.append(UInt64.random(in: 0...UInt64.max) >> UInt64.random(in: 0...63)) }
        let record = Array(#"{"a":1}"#.utf8)
        for seq in values {
            let crc = UInt32(truncatingIfNeeded: seq &* 2_654_435_761)
            var out: [UInt8] = []
            record.withUnsafeBytes { Frame.encode(seq: seq, crc: crc, record: $0, into: &out) }
            let expected = #"{"seq":\#(seq),"crc":\#(crc),"event":{"a":1}}"# + "\n"
            #expect(String(decoding: out, as: UTF8.self) == expected)
            #expect(Frame.length(seq: seq, crc: crc, count: record.count) == out.count)
            #expect(Frame.digits(seq) == String(seq).count)
        }
    }
}

@Suite struct QuotaAccountingTests {
    static let pad = String(repeating: "x", count: 60)

    func config(_ dir: String, access: BeaconLog.Access = .readWrite) -> BeaconLog.Configuration {
        var c = BeaconLog.Configuration(directory: dir)
        c.segmentBytes = 4096
        c.maxBytes = 8192
        c.durability = .none
        c.access = access
        return c
    }

    /// A quota drop moves the checkpoint, but the records it passes were dropped, not acknowledged.
    @Test func aQuotaDropIsNotCountedAsAcknowledged() throws {
        try withTemporaryDirectory { dir in
            let log = try BeaconLog(configuration: config(dir))
            for i in 0..<400 { try log.append(#"{"n":\#(i),"pad":"\#(Self.pad)"}"#) }
            try log.sync()
            let stats = log.stats
            let first = try #require(try log.read(maxRecords: 1).firstSeq)
            #expect(first > 0)
            #expect(stats.dropped["quota"] == first)
            #expect(stats.acknowledgedRecords == 0)
            #expect(stats.pendingRecords == 400 - first)
            try log.close()
        }
    }

    /// A writer without the reader lock counts each dropped record once, whatever the reader acknowledged.
    @Test func aWriteOnlyInstanceCountsEachDroppedRecordOnce() throws {
        try withTemporaryDirectory { dir in
            let writer = try BeaconLog(configuration: config(dir, access: .write))
            let reader = try BeaconLog(configuration: config(dir, access: .read))
            for i in 0..<400 { try writer.append(#"{"n":\#(i),"pad":"\#(Self.pad)"}"#) }
            try writer.sync()
            let first = try #require(try reader.read(maxRecords: 1).firstSeq)
            #expect(first > 0)
            #expect(writer.stats.dropped["quota"] == first)
            #expect(writer.stats.pendingRecords == 400 - first)
            // The reader takes everything; the next drops hold only records appended after that.
            var batch = try reader.read(maxRecords: 10_000)
            #expect(batch.lastSeq == 399)
            try reader.acknowledge(through: batch.end)
            try reader.close()
            for i in 400..<800 { try writer.append(#"{"n":\#(i),"pad":"\#(Self.pad)"}"#) }
            try writer.sync()
            // A fresh reader: one that kept a segment open could still read it after the drop.
            let reader2 = try BeaconLog(configuration: config(dir, access: .read))
            batch = try reader2.read(maxRecords: 10_000)
            let second = try #require(batch.firstSeq)
            #expect(batch.lastSeq == 799)
            #expect(second > 400)
            #expect(writer.stats.dropped["quota"] == first + (second - 400))
            try writer.close()
            try reader2.close()
        }
    }
}

@Suite struct CheckpointSeqTests {
    /// A checkpoint whose segment starts after its seq must not pass over the records in between.
    @Test func aCheckpointNamingANewerSegmentThanItsSeqResumesAtItsSeq() throws {
        try withTemporaryDirectory { dir in
            let config = smallConfig(dir)
            try fillLog(config, count: 200, pad: 38)
            let segments = try segmentNumbers(dir)
            #expect(segments.count >= 3)
            // Seq 5 lives in the first segment; name the third.
            var file = Checkpoint(generation: 1, position: LogPosition(segment: segments[2], offset: 0, seq: 5)).encodedSlot()
            file += [UInt8](repeating: 0, count: Checkpoint.slotSize)
            try Data(file).write(to: URL(fileURLWithPath: dir + "/" + Checkpoint.fileName))
            let log = try BeaconLog(configuration: config)
            #expect(log.stats.checkpointRecovery != nil)
            let batch = try log.read(maxRecords: 1000)
            #expect(batch.firstSeq == 5)
            #expect(batch.seqs == Array(5..<200))
            try log.close()
        }
    }
}

@Suite struct CorruptReasonTests {
    /// Each kind of damage is counted under its reason, and the counts survive a reopen.
    @Test func skippedRecordsAreCountedByReason() throws {
        try withTemporaryDirectory { dir in
            let config = smallConfig(dir)
            try fillLog(config, count: 20, pad: 10)
            let path = segmentPath(dir, 0)
            var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
            let starts = [0] + bytes.indices.filter { bytes[$0] == 0x0A }.map { $0 + 1 }.dropLast()
            // Record 3: one event byte changed (checksum). Record 7: its frame broken (malformed).
            // Record 11: zero-filled. Record 15: a seq digit changed (seqDigits).
            let event3 = bytes[starts[3]...].firstIndex(of: 0x78)!  // an 'x' of the padding
            bytes[event3] = 0x79
            bytes[starts[7] + 2] = 0x53  // {"Seq"
            for k in starts[11]..<(starts[12] - 1) { bytes[k] = 0 }
            bytes[starts[15] + 8] = bytes[starts[15] + 8] == 0x39 ? 0x38 : bytes[starts[15] + 8] + 1  // "seq":15 -> 16 or 14
            try Data(bytes).write(to: URL(fileURLWithPath: path))
            let log = try BeaconLog(configuration: config)
            let batch = try log.read(maxRecords: 100)
            #expect(batch.seqs == (0..<20).filter { ![3, 7, 11, 15].contains($0) }.map(UInt64.init))
            let expected: [String: UInt64] = ["checksum": 1, "malformed": 1, "zeros": 1, "seqDigits": 1]
            #expect(log.stats.skippedCorruptByReason == expected)
            #expect(log.stats.skippedCorrupt == 4)
            try log.close()
            let again = try BeaconLog(configuration: config)
            #expect(again.stats.skippedCorruptByReason == expected)
            // Reading the same damage again after the restart does not count it twice.
            _ = try again.read(maxRecords: 100)
            #expect(again.stats.skippedCorrupt == 4)
            #expect(again.stats.skippedCorruptByReason == expected)
            try again.close()
        }
    }
}
