import Foundation
import Testing
@testable import BeaconLog
import FaultInjection

/// A damaged or wrong checkpoint falls back safely (never passing over unacknowledged records)
/// and says so in `stats.checkpointRecovery`; opening reads only the newest segment.
@Suite struct CheckpointRecoveryTests {
    /// How the checkpoint file is damaged.
    enum Damage: String, CaseIterable, Sendable {
        case empty, zeros, bothSlotsGarbage, newerSlotGarbage, olderSlotGarbage, truncatedMidSlot
        case pastTheSegmentEnd, pastTheLogEnd, midRecord, missingSegment, deletedSegment, segmentStartsAfterItsSeq
    }

    /// The snapshot: 400 records, the first 150 acknowledged twice over (so both slots hold a
    /// checkpoint: generation 1 at seq 100, generation 2 at seq 150), segment 0 deleted.
    static let snapshot: Result<LogSnapshot, any Error> = Result {
        try withTemporaryDirectory { dir in
            let log = try BeaconLog(configuration: smallConfig(dir))
            var records: [String] = []
            for i in 0..<400 {
                let r = numbered(i, pad: (i * 7) % 23)
                records.append(r)
                try log.append(r)
            }
            try log.sync()
            try log.acknowledge(through: try log.read(maxRecords: 100).end)
            try log.acknowledge(through: try log.read(maxRecords: 50).end)
            try log.close()
            var files: [String: [UInt8]] = [:]
            for name in try FileManager.default.contentsOfDirectory(atPath: dir) where !name.hasSuffix(".lock") && !name.hasSuffix(".counters") {
                files[name] = try fileBytes(dir + "/" + name)
            }
            return LogSnapshot(files: files, segments: try segmentNumbers(dir), records: records)
        }
    }

    /// A checkpoint file whose slot for `generation` holds `position` and whose other slot is kept.
    static func withSlot(_ file: [UInt8], generation: UInt64, position: LogPosition) -> [UInt8] {
        var file = file
        let slot = Checkpoint(generation: generation, position: position).encodedSlot()
        let start = Int(generation % 2) * Checkpoint.slotSize
        file.replaceSubrange(start..<(start + Checkpoint.slotSize), with: slot)
        return file
    }

    @Test(arguments: Damage.allCases)
    func damagedCheckpointFallsBackSafely(damage: Damage) throws {
        let snapshot = try Self.snapshot.get()
        let original = snapshot.files[Checkpoint.fileName]!
        let decoded = Checkpoint.decode(file: original)
        let cp = try #require(decoded.checkpoint)
        #expect(decoded.invalidSlots == 0)
        #expect(cp.generation == 2 && cp.position.seq == 150)
        let oldest = snapshot.segments.first!
        #expect(oldest > 0, "segment 0 should have been deleted by the acknowledgement")
        let oldestFirstSeq = snapshot.lines(ofSegment: oldest).first!.seq!
        let cpLines = snapshot.lines(ofSegment: cp.position.segment)
        let cpLine = try #require(cpLines.first { $0.seq == 150 })
        var garbage = SeededGenerator(seed: 9)
        let randomBytes = { (n: Int) -> [UInt8] in (0..<n).map { _ in UInt8.random(in: 0...255, using: &garbage) } }
        // (the file, whether the recovery must be reported, the highest seq delivery may resume at)
        let file: [UInt8]
        var mustReport: Bool? = true
        var exactResume: UInt64?
        let resumeAtMost: UInt64 = 150
        switch damage {
        case .empty:
            file = []
        case .zeros:
            file = [UInt8](repeating: 0, count: Checkpoint.fileSize)
        case .bothSlotsGarbage:
            file = randomBytes(Checkpoint.fileSize)
        case .newerSlotGarbage:
            // Generation 2 is in slot 0: the older slot (generation 1, seq 100) is what is left.
            file = randomBytes(Checkpoint.slotSize) + Array(original[Checkpoint.slotSize...])
            // Its segment is deleted: delivery resumes at the oldest segment, at or after seq 100.
            exactResume = max(100, oldestFirstSeq)
        case .olderSlotGarbage:
            // A torn write of generation 3 into slot 1: generation 2 in slot 0 stands, exactly.
            file = Array(original[..<Checkpoint.slotSize]) + randomBytes(Checkpoint.slotSize)
            mustReport = nil
            exactResume = 150
        case .truncatedMidSlot:
            file = Array(original[..<20])
        case .pastTheSegmentEnd:
            let size = UInt64(snapshot.files[SegmentName.fileName(cp.position.segment)]!.count)
            file = Self.withSlot(original, generation: 3, position: LogPosition(segment: cp.position.segment, offset: size + 100, seq: 150))
        case .pastTheLogEnd:
            file = Self.withSlot(original, generation: 3, position: LogPosition(segment: snapshot.segments.last!, offset: 1 << 30, seq: 10_000))
        case .midRecord:
            file = Self.withSlot(original, generation: 3, position: LogPosition(segment: cp.position.segment, offset: UInt64(cpLine.range.lowerBound + 7), seq: 150))
            exactResume = 150
        case .missingSegment:
            file = Self.withSlot(original, generation: 3, position: LogPosition(segment: snapshot.segments.last! + 40, offset: 0, seq: 150))
        case .deletedSegment:
            // Segment 0 was deleted after the checkpoint passed it: that is normal, resume at seq 150.
            file = Self.withSlot(original, generation: 3, position: LogPosition(segment: 0, offset: 40, seq: 150))
            mustReport = nil
            exactResume = 150
        case .segmentStartsAfterItsSeq:
            // A valid-looking checkpoint naming the newest segment at offset 0 with an older seq.
            file = Self.withSlot(original, generation: 3, position: LogPosition(segment: snapshot.segments.last!, offset: 0, seq: 150))
            exactResume = 150
        }
        try withTemporaryDirectory { dir in
            try snapshot.restore(into: dir) { files in files[Checkpoint.fileName] = file }
            let log = try BeaconLog(configuration: smallConfig(dir))
            let note = log.stats.checkpointRecovery
            if mustReport == true {
                #expect(note != nil, "\(damage) was not reported")
            }
            let read = try readAll(log)
            let first = try #require(read.seqs.first)
            // Never passes over an unacknowledged record: resumes at or before seq 150, never before what exists.
            #expect(first <= resumeAtMost, "\(damage): resumed at \(first), \(note ?? "")")
            #expect(first >= oldestFirstSeq)
            if let exactResume { #expect(first == exactResume, "\(damage): resumed at \(first), \(note ?? "")") }
            #expect(read.seqs == Array(first..<400), "\(damage): \(read.seqs.prefix(3))…")
            #expect(read.records == Array(snapshot.records[Int(first)...]))
            #expect(read.skipped == 0)
            // Acknowledging again repairs the checkpoint for the next open.
            try log.acknowledge(through: try log.read(maxRecords: 250).end)
            try log.close()
            let again = try BeaconLog(configuration: smallConfig(dir))
            #expect(again.stats.checkpointRecovery == nil)
            #expect(try again.read(maxRecords: 1).firstSeq == (first + 250 < 400 ? first + 250 : nil))
            try again.close()
        }
    }

    /// Opening reads the checkpoint, its segment (one record) and the newest segment: the same
    /// bytes with 4 segments of backlog as with 40 (counted through the file-system seam).
    @Test func openingReadsOnlyTheNewestSegment() throws {
        for backlog in [4, 40] {
            try withTemporaryDirectory { dir in
                do {
                    let log = try BeaconLog(configuration: smallConfig(dir))
                    var i = 0
                    while try segmentNumbers(dir).count < backlog {
                        try log.append(numbered(i, pad: 40))
                        i += 1
                        if i % 50 == 0 { try log.sync() }
                    }
                    try log.acknowledge(through: try log.read(maxRecords: 3).end)
                    try log.close()
                }
                let numbers = try segmentNumbers(dir)
                let newestSize = Int(try fileSize(segmentPath(dir, numbers.last!)))
                let fs = FaultyFileSystem()
                let log = try BeaconLog(configuration: faultyConfig(dir, fs))
                let reads = fs.calls(.read)
                let paths = Set(reads.map { ($0.path as NSString).lastPathComponent })
                let allowed: Set<String> = [Checkpoint.fileName, SegmentName.fileName(numbers.first!), SegmentName.fileName(numbers.last!)]
                #expect(paths.isSubset(of: allowed), "opening read \(paths.subtracting(allowed).sorted())")
                #expect(Set(fs.calls(.open).map { ($0.path as NSString).lastPathComponent }).filter { $0.hasSuffix(".jsonl") }.isSubset(of: allowed))
                // The newest segment whole, one record (up to a read-ahead) at the checkpoint, the checkpoint file.
                let bytes = reads.reduce(0) { $0 + $1.bytes }
                #expect(bytes <= newestSize + 4096 + Checkpoint.fileSize, "open read \(bytes) bytes with \(backlog) segments")
                try log.close()
            }
        }
    }
}

extension CheckpointRecoveryTests {
    /// Acknowledging exactly the end of a sealed segment deletes it; reopening must not fall back.
    @Test(arguments: [1, 2, 3])
    func acknowledgeToTheEndOfASealedSegmentSurvivesReopen(segmentsAcked: Int) throws {
        try withTemporaryDirectory { dir in
            let total: UInt64
            let acked: UInt64
            do {
                let log = try BeaconLog(configuration: smallConfig(dir))
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
            let log = try BeaconLog(configuration: smallConfig(dir))
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
