import Foundation
import Glibc
import Testing
@testable import BeaconLog

/// CRC-32C, the frame format `{"seq":N,"crc":C,"event":<record>}\n`, and what append refuses.
@Suite struct FramingTests {
    /// The check value and the RFC 3720 (iSCSI) test vectors.
    @Test(arguments: [
        (Array("123456789".utf8), UInt32(0xE306_9283)),
        ([UInt8](), UInt32(0)),
        ([UInt8](repeating: 0, count: 32), UInt32(0x8A91_36AA)),
        ([UInt8](repeating: 0xFF, count: 32), UInt32(0x62A8_AB43)),
        ((0..<32).map { UInt8($0) }, UInt32(0x46DD_794E)),
        ((0..<32).reversed().map { UInt8($0) }, UInt32(0x113F_DB5C)),
    ])
    func crc32cKnownVectors(bytes: [UInt8], expected: UInt32) {
        #expect(CRC32C.checksum(bytes) == expected)
        bytes.withUnsafeBytes { #expect(CRC32C.software(0, $0) == expected) }
    }

    /// Checksumming in pieces gives the same value as in one go, at every split point.
    @Test func crcIsIncremental() {
        let bytes = Array("The quick brown fox jumps over the lazy dog: {\"seq\":1}".utf8)
        let whole = CRC32C.checksum(bytes)
        bytes.withUnsafeBytes { raw in
            for split in 0...raw.count {
                let a = CRC32C.update(0, UnsafeRawBufferPointer(rebasing: raw[..<split]))
                let b = CRC32C.update(a, UnsafeRawBufferPointer(rebasing: raw[split...]))
                #expect(b == whole, "split at \(split)")
            }
        }
    }

    /// The bytes of a frame, exactly, both from the encoder and as written into the segment.
    @Test func frameBytesAreExact() throws {
        let record = #"{"event":"Purchase","price":9.99}"#
        let crc = CRC32C.checksum(Array(record.utf8))
        let expected = #"{"seq":0,"crc":\#(crc),"event":\#(record)}"# + "\n"
        #expect(String(decoding: Frame.encode(seq: 0, record: Array(record.utf8)), as: UTF8.self) == expected)
        try withTemporaryDirectory { dir in
            let log = try BeaconLog(configuration: smallConfig(dir))
            #expect(try log.append(record) == 0)
            #expect(try log.append("1") == 1)
            try log.close()
            let text = String(decoding: try fileBytes(segmentPath(dir, 0)), as: UTF8.self)
            let crc1 = CRC32C.checksum(Array("1".utf8))
            #expect(text == expected + #"{"seq":1,"crc":\#(crc1),"event":1}"# + "\n")
        }
    }

    /// Quotes, escapes, unicode (multi-byte, astral, combining) and bare JSON values round-trip byte for byte.
    @Test func recordsRoundTripByteForByte() throws {
        let records = [
            #"{"q":"she said \"hi\"","bs":"C:\\path","nl":"a\nb\tc\r","u":"\u0000\u001f"}"#,
            #"{"name":"Zoë","cjk":"神策数据","ar":"تحليلات","emoji":"👩‍👩‍👧‍👦","comb":"e\#u{301}"}"#,
            #""just a string""#,
            "42",
            "null",
            #"[1,2,{"a":[]}]"#,
            #"{"}":"{\"seq\":1,\"crc\":2,\"event\":3}"}"#,
            #"{"big":"\#(String(repeating: "é", count: 5000))"}"#,
        ]
        try withTemporaryDirectory { dir in
            do {
                let log = try BeaconLog(configuration: smallConfig(dir))
                for r in records { try log.append(r) }
                try log.append(contentsOf: records.map { Array($0.utf8) })
                try log.sync()
                #expect(try readAll(log).records == records + records)
                try log.close()
            }
            let log = try BeaconLog(configuration: smallConfig(dir))
            let read = try readAll(log)
            #expect(read.records == records + records)
            #expect(read.seqs == Array(0..<UInt64(2 * records.count)))
            try log.close()
            try expectClean(dir)
        }
    }

    /// Empty records and records with a raw newline are refused with `.invalidRecord`, counted, and
    /// take no sequence number; a batch with one bad record appends nothing.
    @Test(arguments: ["", "\n", "{\"a\":\n1}", "{}\n", "\n{}"])
    func emptyAndNewlineRecordsAreRefused(bad: String) throws {
        try withTemporaryDirectory { dir in
            let log = try BeaconLog(configuration: smallConfig(dir))
            try log.append("{}")
            _ = expectLogError(.invalidRecord) { try log.append(bad) }
            _ = expectLogError(.invalidRecord) { try log.append(Array(bad.utf8)) }
            _ = expectLogError(.invalidRecord) { try log.append(contentsOf: [Array("{}".utf8), Array(bad.utf8), Array("{}".utf8)]) }
            #expect(log.stats.refused[.invalidRecord] == 3)
            #expect(try log.append("{}") == 1)
            try log.sync()
            #expect(try readAll(log).seqs == [0, 1])
            try log.close()
            try expectClean(dir)
        }
    }

    /// Changing any single bit of a frame (except its newline, or into a newline) makes it
    /// unreadable as that record: the parser reports it corrupt, or reads a different seq.
    @Test func everyBitFlipOfAFrameIsDetected() {
        let record = Array(#"{"n":7,"s":"AZaz09*J"}"#.utf8)
        let frame = Frame.encode(seq: 1234, record: record)
        for byte in 0..<(frame.count - 1) {
            for bit in 0..<8 {
                var damaged = frame
                damaged[byte] ^= UInt8(1 << bit)
                if damaged[byte] == 0x0A { continue }
                let parsed = damaged.withUnsafeBytes { Frame.parse($0, line: 0..<(damaged.count - 1)) }
                switch parsed {
                case .corrupt:
                    break
                case .record(let seq, let event):
                    // Only a damaged seq digit keeps the CRC valid; the event is intact then.
                    #expect(seq != 1234, "byte \(byte) bit \(bit) went undetected")
                    #expect(Array(damaged[event]) == record)
                }
            }
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

    /// Past 192 bytes the instruction runs three chains over 64-byte blocks and joins them: every
    /// length around the group edges (1 to 4 groups, each tail length) and every alignment agrees
    /// with the table, continued from any CRC.
    @Test func threeChainsMatchTable() {
        var rng = SeededGenerator(seed: 0xC3C3)
        let bytes = (0..<2048).map { _ in UInt8(truncatingIfNeeded: rng.next()) }
        let edges = [191, 192, 193, 200, 255, 256, 383, 384, 385, 576, 767, 768, 769, 1000, 2040]
        bytes.withUnsafeBytes { raw in
            for start in 0..<8 {
                for count in edges where start + count <= raw.count {
                    let slice = UnsafeRawBufferPointer(rebasing: raw[start..<(start + count)])
                    let seed = UInt32(truncatingIfNeeded: rng.next())
                    #expect(CRC32C.update(seed, slice) == CRC32C.software(seed, slice), "\(count) bytes at \(start)")
                    #expect(CRC32C.checksum(ofLine: slice) == (memchr(slice.baseAddress!, 0x0A, count) == nil ? CRC32C.software(0, slice) : nil))
                }
            }
        }
    }

    /// The append path's one pass: the checksum of a record without a raw newline, nil with one at
    /// any position (each word and vector lane, the byte tail), for lengths up to two 3-chain groups.
    @Test func checksumOfLineFindsEveryNewline() {
        for count in 1...400 {
            var line = [UInt8](repeating: 0x61, count: count)
            let crc = line.withUnsafeBytes { CRC32C.checksum(ofLine: $0) }
            #expect(crc == CRC32C.checksum(line), "\(count) bytes")
            for position in 0..<count {
                line[position] = 0x0A
                #expect(line.withUnsafeBytes { CRC32C.checksum(ofLine: $0) } == nil, "newline at \(position) of \(count)")
                line[position] = 0x61
            }
        }
        // Bytes that differ from a newline in one bit are not newlines.
        let near: [UInt8] = (0..<8).map { 0x0A ^ (1 << $0) } + [0x0B, 0x8A, 0x00]
        let line = Array((0..<300).map { near[$0 % near.count] })
        #expect(line.withUnsafeBytes { CRC32C.checksum(ofLine: $0) } == CRC32C.checksum(line))
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
