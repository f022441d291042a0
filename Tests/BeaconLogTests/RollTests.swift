import Foundation
import Testing
@testable import BeaconLog
import FaultInjection

/// Segment rolls: a frame that would make the segment exceed `segmentBytes` starts the next one.
@Suite struct RollTests {
    static let segmentBytes = 4096

    /// A record whose frame at `seq` is exactly `length` bytes long: padding near the target,
    /// and a varying letter to move the CRC's digit count.
    func record(seq: UInt64, frameLength length: Int) -> [UInt8] {
        let overhead = frameLength(seq: seq, record: Array(#"{"p":""}"#.utf8)) - 8
        for pad in max(0, length - overhead - 8 - 12)...max(0, length - overhead - 8 + 2) {
            for letter in "abcdefghijklmnopqrstuvwxyz" {
                let r = Array(#"{"p":"\#(String(repeating: letter, count: pad))"}"#.utf8)
                if frameLength(seq: seq, record: r) == length { return r }
            }
        }
        Issue.record("no record of frame length \(length) at seq \(seq)")
        return Array("{}".utf8)
    }

    /// For the first and second segment: a frame ending at S-1 or S stays, one ending at S+1 rolls.
    @Test(arguments: [0, 1], [-1, 0, 1])
    func frameEndingAtTheBoundary(segment: Int, delta: Int) throws {
        let s = Self.segmentBytes
        try withTemporaryDirectory { dir in
            let log = try BeaconLog(configuration: smallConfig(dir, segmentBytes: s))
            var seq: UInt64 = 0
            let filler = Array(numbered(0, pad: 70).utf8)
            // Fill earlier segments, then the target one to 3-4 filler frames short of S.
            while true {
                try log.append(filler)
                seq += 1
                try log.sync()
                let numbers = try segmentNumbers(dir)
                let tail = numbers.last!
                let used = Int(try fileSize(segmentPath(dir, tail)))
                if tail == UInt64(segment) && used + 4 * frameLength(seq: seq, record: filler) > s { break }
            }
            let used = Int(try fileSize(segmentPath(dir, UInt64(segment))))
            let last = record(seq: seq, frameLength: s + delta - used)
            #expect(try log.append(last) == seq)
            try log.append("{}")
            try log.sync()
            let numbers = try segmentNumbers(dir)
            #expect(numbers == Array(0...UInt64(segment + 1)))
            let sizes = try numbers.map { Int(try fileSize(segmentPath(dir, $0))) }
            if delta <= 0 {
                #expect(sizes[segment] == s + delta)
                #expect(try rawLines(segmentPath(dir, UInt64(segment))).last?.seq == seq)
                #expect(try rawLines(segmentPath(dir, UInt64(segment + 1))).map(\.seq) == [seq + 1])
            } else {
                #expect(sizes[segment] == used)
                #expect(try rawLines(segmentPath(dir, UInt64(segment + 1))).map(\.seq) == [seq, seq + 1])
            }
            #expect(sizes.allSatisfy { $0 <= s })
            #expect(try readAll(log).seqs == Array(0...(seq + 1)))
            try log.close()
            try expectClean(dir)
        }
    }

    /// The same boundary reached inside one `append(contentsOf:)`: the batch is split across the roll.
    @Test(arguments: [-1, 0, 1])
    func batchCrossingTheBoundary(delta: Int) throws {
        let s = Self.segmentBytes
        try withTemporaryDirectory { dir in
            let log = try BeaconLog(configuration: fastConfig(dir, durability: .everyRecord, segmentBytes: s))
            let filler = Array(numbered(0, pad: 100).utf8)
            var batch: [[UInt8]] = []
            var used = 0
            var seq: UInt64 = 0
            while used + 3 * frameLength(seq: seq, record: filler) < s {
                batch.append(filler)
                used += frameLength(seq: seq, record: filler)
                seq += 1
            }
            batch.append(record(seq: seq, frameLength: s + delta - used))
            batch.append(filler)
            #expect(try log.append(contentsOf: batch) == 0..<UInt64(batch.count))
            let sizes = try segmentNumbers(dir).map { Int(try fileSize(segmentPath(dir, $0))) }
            #expect(sizes.count == 2)
            #expect(sizes[0] == (delta <= 0 ? s + delta : used))
            #expect(try readAll(log).seqs == Array(0..<UInt64(batch.count)))
            try log.close()
            try expectClean(dir)
        }
    }

    /// Random record sizes (some larger than a segment): every segment is at most S unless it holds
    /// one frame, segments are packed (the next segment's first frame would not have fitted),
    /// seqs run on across segments, and everything reads back in order.
    @Test(arguments: [BeaconLog.Durability.none, .everyRecord, .batched(records: 16, interval: .milliseconds(2))])
    func randomSizesRollCorrectly(durability: BeaconLog.Durability) throws {
        let s = Self.segmentBytes
        var rng = SeededGenerator(seed: 0xB0A7)
        try withTemporaryDirectory { dir in
            let log = try BeaconLog(configuration: fastConfig(dir, durability: durability, segmentBytes: s))
            var records: [String] = []
            for i in 0..<400 {
                let pad = Int.random(in: 0..<10, using: &rng) == 0 ? Int.random(in: 3000...6000, using: &rng) : Int.random(in: 0...300, using: &rng)
                records.append(numbered(i, pad: pad))
            }
            for r in records { try log.append(r) }
            try log.close()
            var expectedSeq: UInt64 = 0
            let numbers = try segmentNumbers(dir)
            #expect(numbers.count > 10)
            for (k, number) in numbers.enumerated() {
                let lines = try rawLines(segmentPath(dir, number))
                let size = Int(try fileSize(segmentPath(dir, number)))
                #expect(size == lines.last?.range.upperBound, "segment \(number) has bytes after its last line")
                #expect(size <= s || lines.count == 1, "segment \(number) is \(size) bytes with \(lines.count) frames")
                for line in lines {
                    #expect(line.seq == expectedSeq)
                    expectedSeq += 1
                }
                if k + 1 < numbers.count, let next = try rawLines(segmentPath(dir, numbers[k + 1])).first {
                    #expect(size + next.range.count > s, "segment \(number) rolled early: \(size) + \(next.range.count) fits in \(s)")
                }
            }
            #expect(expectedSeq == 400)
            let again = try BeaconLog(configuration: smallConfig(dir, durability: durability, segmentBytes: s))
            let read = try readAll(again, batchSize: 37)
            #expect(read.records == records)
            try again.close()
            try expectClean(dir)
        }
    }
}

extension RollTests {
    /// A frame that ends exactly at segmentBytes stays in its segment; one byte more rolls.
    @Test(arguments: [0, 1])
    func aFrameThatFitsExactlyStaysInTheSegment(extra: Int) throws {
        try withTemporaryDirectory { dir in
            let log = try BeaconLog(configuration: smallConfig(dir))
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
