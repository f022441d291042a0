import Foundation
import Testing
@testable import BeaconLog
import FaultInjection

/// A log directory's files, captured once and written out again for each damaged variant.
struct LogSnapshot {
    var files: [String: [UInt8]]
    var segments: [UInt64]
    /// Records by seq, as appended.
    var records: [String]

    /// Builds a log of `count` records in 4 KiB segments, acknowledging the first `acknowledged`.
    static func build(count: Int, acknowledged: Int = 0, segmentBytes: Int = 4096) throws -> LogSnapshot {
        try withTemporaryDirectory { dir in
            let log = try BeaconLog(configuration: smallConfig(dir, segmentBytes: segmentBytes))
            var records: [String] = []
            for i in 0..<count {
                let r = numbered(i, pad: i >= count - 3 ? 0 : (i * 7) % 23)
                records.append(r)
                try log.append(r)
            }
            try log.sync()
            if acknowledged > 0 {
                let batch = try log.read(maxRecords: acknowledged)
                try log.acknowledge(through: batch.end)
            }
            try log.close()
            var files: [String: [UInt8]] = [:]
            for name in try FileManager.default.contentsOfDirectory(atPath: dir) where !name.hasSuffix(".lock") {
                files[name] = try fileBytes(dir + "/" + name)
            }
            return LogSnapshot(files: files, segments: try segmentNumbers(dir), records: records)
        }
    }

    /// Writes the files into `dir` (created), after `change` edits them.
    func restore(into dir: String, _ change: (inout [String: [UInt8]]) -> Void = { _ in }) throws {
        var files = self.files
        change(&files)
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        for (name, bytes) in files { try writeFile(dir + "/" + name, bytes) }
    }

    /// The lines of a segment in the snapshot.
    func lines(ofSegment number: UInt64) -> [RawLine] {
        rawLines(of: files[SegmentName.fileName(number)]!)
    }
}

/// Recovery on open: every way the newest segment's tail can be torn, and
/// single damaged records anywhere.
@Suite struct RecoverySweepTests {
    enum Damage: String, CaseIterable, Sendable {
        /// The file ends at the offset.
        case truncate
        /// Zero bytes from the offset to the old end (ext4 after a power loss).
        case zeroFill
        /// Random bytes, newlines included, from the offset to the old end.
        case garbage
    }

    /// For every byte offset of the last three records of the newest segment: damage from there,
    /// reopen; exactly the records that end before the offset remain, in order, the invalid bytes
    /// are cut off, and appending continues with the next seq in a log that verifies clean.
    @Test(arguments: Damage.allCases)
    func everyTailOffset(damage: Damage) throws {
        let snapshot = try LogSnapshot.build(count: 130, acknowledged: 5)
        let newest = snapshot.segments.last!
        let name = SegmentName.fileName(newest)
        let lines = snapshot.lines(ofSegment: newest)
        #expect(snapshot.segments.count >= 2)
        let size = snapshot.files[name]!.count
        let from = lines[lines.count - 3].range.lowerBound
        let firstInNewest = lines.first!.seq!
        // One directory per damage kind: for each offset only the newest segment is rewritten
        // and the segment the previous round's append created is removed.
        try withTemporaryDirectory { dir in
            try snapshot.restore(into: dir)
            for offset in from...size {
                var rng = SeededGenerator(seed: UInt64(offset))
                var bytes = snapshot.files[name]!
                switch damage {
                case .truncate:
                    bytes.removeLast(size - offset)
                case .zeroFill:
                    for i in offset..<size { bytes[i] = 0 }
                case .garbage:
                    for i in offset..<size { bytes[i] = UInt8.random(in: 0...255, using: &rng) }
                }
                try writeFile(segmentPath(dir, newest), bytes)
                try? FileManager.default.removeItem(atPath: segmentPath(dir, newest + 1))
                let intact = UInt64(lines.filter { $0.range.upperBound <= offset }.count)
                let expectedEnd = firstInNewest + intact
                let fs = FaultyFileSystem()
                fs.skipSyncs = true
                var config = smallConfig(dir)
                config.fileSystem = fs
                let log = try BeaconLog(configuration: config)
                let cut = try fileSize(segmentPath(dir, newest))
                #expect(cut == UInt64(lines.filter { $0.range.upperBound <= offset }.last?.range.upperBound ?? 0), "offset \(offset)")
                #expect(log.stats.truncatedBytes == UInt64(damage == .truncate ? offset : size) - cut, "offset \(offset)")
                let read = try readAll(log)
                #expect(read.seqs == Array(5..<expectedEnd), "offset \(offset): \(read.seqs.suffix(3))")
                #expect(read.records == Array(snapshot.records[5..<Int(expectedEnd)]), "offset \(offset)")
                #expect(read.skipped == 0)
                #expect(try log.append("{}") == expectedEnd, "offset \(offset)")
                try log.close()
                // Writing continued in a new segment, never after the repaired tail.
                #expect(try segmentNumbers(dir).last == newest + 1)
                try expectClean(dir)
            }
        }
        print("recovery sweep \(damage): \(size - from + 1) offsets over the last 3 records of segment \(newest), each reopened, read, appended to and verified")
    }

    /// The whole newest segment is empty, zeros or garbage (a crash right after the roll created
    /// it, or a block lost): its predecessor's last record sets the next seq, nothing else is lost.
    @Test(arguments: ["empty", "zeros", "garbage"])
    func newestSegmentHoldsNoRecord(content: String) throws {
        let snapshot = try LogSnapshot.build(count: 130)
        let newest = snapshot.segments.last!
        let previousLast = snapshot.lines(ofSegment: snapshot.segments[snapshot.segments.count - 2]).last!.seq!
        var rng = SeededGenerator(seed: 5)
        try withTemporaryDirectory { dir in
            try snapshot.restore(into: dir) { files in
                switch content {
                case "empty": files[SegmentName.fileName(newest)] = []
                case "zeros": files[SegmentName.fileName(newest)] = [UInt8](repeating: 0, count: 4096)
                default: files[SegmentName.fileName(newest)] = (0..<3000).map { _ in UInt8.random(in: 0...255, using: &rng) }
                }
            }
            let log = try BeaconLog(configuration: smallConfig(dir))
            #expect(log.stats.nextSeq == previousLast + 1)
            let read = try readAll(log)
            #expect(read.seqs == Array(0...previousLast))
            #expect(read.skipped == 0)
            #expect(try log.append("{}") == previousLast + 1)
            try log.close()
            #expect(try segmentNumbers(dir).last == newest + 1)
            try expectClean(dir)
        }
    }

    /// Damaging the tail of an older segment too (a torn write that was never repaired) loses only
    /// that segment's torn records, counted, and the following segments are still read.
    @Test func tornTailOfAnOlderSegmentIsPassedOver() throws {
        let snapshot = try LogSnapshot.build(count: 200)
        let older = snapshot.segments[1]
        let name = SegmentName.fileName(older)
        let lines = snapshot.lines(ofSegment: older)
        try withTemporaryDirectory { dir in
            try snapshot.restore(into: dir) { files in
                // Cut the last line in half: an incomplete record at the end of a sealed segment.
                let last = lines.last!.range
                files[name]!.removeLast(last.count / 2)
            }
            let log = try BeaconLog(configuration: smallConfig(dir))
            let read = try readAll(log)
            let lost = lines.last!.seq!
            #expect(read.seqs == Array(0..<200).filter { $0 != lost })
            #expect(read.skipped == 1)
            #expect(log.stats.skippedCorrupt == 1)
            try log.close()
        }
    }

    /// One bit flipped inside one record of an older segment (its newline excepted, and no flip
    /// that makes a newline): exactly that record is passed over and counted; every other record is
    /// delivered with its own seq and bytes. Three random bits of every record of the two oldest segments.
    @Test(arguments: [0, 1])
    func bitFlipInAnOlderSegment(segmentIndex: Int) throws {
        let snapshot = try LogSnapshot.build(count: 200)
        let number = snapshot.segments[segmentIndex]
        let name = SegmentName.fileName(number)
        let lines = snapshot.lines(ofSegment: number)
        var rng = SeededGenerator(seed: 77 + UInt64(segmentIndex))
        var failures: [String] = []
        try withTemporaryDirectory { dir in
            try snapshot.restore(into: dir)
            for line in lines {
                var byte: Int
                var bit: Int
                repeat {
                    byte = Int.random(in: line.range.lowerBound..<(line.range.upperBound - 1), using: &rng)
                    bit = Int.random(in: 0..<8, using: &rng)
                } while snapshot.files[name]![byte] ^ UInt8(1 << bit) == 0x0A
                if let failure = try flipOnlySkipsThatRecord(snapshot, in: dir, segment: number, line: line, byte: byte, bit: bit) { failures.append(failure) }
            }
        }
        #expect(failures.isEmpty, "\(failures.count) flips: \(failures.prefix(6))")
    }

    /// Flips one bit and checks that exactly the damaged record is passed over and counted;
    /// returns what went wrong otherwise.
    func flipOnlySkipsThatRecord(_ snapshot: LogSnapshot, in dir: String, segment: UInt64, line: RawLine, byte: Int, bit: Int) throws -> String? {
        let name = SegmentName.fileName(segment)
        let total = snapshot.records.count
        var damagedBytes = snapshot.files[name]!
        damagedBytes[byte] ^= UInt8(1 << bit)
        try writeFile(dir + "/" + name, damagedBytes)
        defer { try? writeFile(dir + "/" + name, snapshot.files[name]!) }
        // Read-only: no lock, no repair, no counters written, so the directory stays as restored.
        var config = smallConfig(dir)
        config.access = .readOnly
        let log = try BeaconLog(configuration: config)
        defer { try? log.close() }
        let read = try readAll(log)
        let damaged = line.seq!
        let expected = (0..<total).filter { UInt64($0) != damaged }
        let ok = read.seqs == expected.map { UInt64($0) }
            && read.records == expected.map { snapshot.records[$0] }
            && read.skipped == 1 && log.stats.skippedCorrupt == 1
        if ok { return nil }
        let column = byte - line.range.lowerBound
        return "seq \(damaged) (segment \(segment)) byte \(column) ('\(Character(Unicode.Scalar(snapshot.files[name]![byte])))') bit \(bit): skipped \(read.skipped), missing \(Set(expected.map { UInt64($0) }).subtracting(read.seqs).sorted()), extra \(Set(read.seqs).subtracting(expected.map { UInt64($0) }).sorted()), wrong bytes at seqs \(zip(read.seqs, read.records).filter { Int($0.0) >= total || snapshot.records[Int($0.0)] != $0.1 }.map(\.0))"
    }

    /// Every bit of every seq digit of the first two and the last record of each older segment:
    /// the CRC does not cover the seq, so this is where the reader must reason about the sequence.
    @Test(arguments: [0, 1])
    func seqDigitFlipsAtSegmentEdges(segmentIndex: Int) throws {
        let snapshot = try LogSnapshot.build(count: 200)
        var failures: [String] = []
        let number = snapshot.segments[segmentIndex]
        let name = SegmentName.fileName(number)
        let lines = snapshot.lines(ofSegment: number)
        try withTemporaryDirectory { dir in
            try snapshot.restore(into: dir)
            for line in [lines[0], lines[1], lines[lines.count - 1]] {
                let digits = String(line.seq!).count
                for byte in (line.range.lowerBound + 7)..<(line.range.lowerBound + 7 + digits) {
                    // Bits 0-3 turn a digit into another digit (or ':' ';' '<' '=' '>' '?', which are corrupt).
                    for bit in 0..<4 where snapshot.files[name]![byte] ^ UInt8(1 << bit) != 0x0A {
                        if let failure = try flipOnlySkipsThatRecord(snapshot, in: dir, segment: number, line: line, byte: byte, bit: bit) { failures.append(failure) }
                    }
                }
            }
        }
        #expect(failures.isEmpty, "\(failures.count) flips: \(failures.prefix(8))")
    }
}
