/// The framing of one record: `{"seq":N,"crc":C,"event":<record>}\n` (DESIGN §2).
///
/// The key order is fixed so that a reader finds the event bytes without a JSON parser.
package enum Frame {
    static let seqPrefix: [UInt8] = Array(#"{"seq":"#.utf8)
    static let crcPrefix: [UInt8] = Array(#","crc":"#.utf8)
    static let eventPrefix: [UInt8] = Array(#","event":"#.utf8)
    static let newline: UInt8 = 0x0A

    /// The framing bytes a record of `count` bytes takes on disk at most (without its digits' exact count).
    package static let maxOverhead = 7 + 20 + 7 + 10 + 9 + 2  // 55

    /// The exact length of the frame of a record of `count` bytes with this seq and CRC.
    @inline(__always)
    package static func length(seq: UInt64, crc: UInt32, count: Int) -> Int {
        25 + digits(seq) + digits(UInt64(crc)) + count  // {"seq": ,"crc": ,"event": }\n
    }

    /// Powers of ten, for counting digits without dividing.
    static let powersOfTen: [UInt64] = (0..<20).map { k in (0..<k).reduce(UInt64(1)) { p, _ in p * 10 } }

    /// The number of decimal digits of `value`: from its bit length, corrected by one comparison.
    @inline(__always)
    static func digits(_ value: UInt64) -> Int {
        let bits = 64 - (value | 1).leadingZeroBitCount
        let guess = (bits * 1233) >> 12  // ≈ bits × log10(2)
        if value == 0 { return 1 }
        return powersOfTen.withUnsafeBufferPointer { value >= $0[guess] ? guess + 1 : guess }
    }

    /// "00" … "99": two digits per division when writing numbers.
    static let digitPairs: [UInt8] = {
        var pairs: [UInt8] = []
        for n in 0..<100 {
            pairs.append(UInt8(0x30 + n / 10))
            pairs.append(UInt8(0x30 + n % 10))
        }
        return pairs
    }()

    /// Appends the frame of `record` (whose CRC-32C is `crc`) with sequence number `seq` to `out`.
    ///
    /// The hot path of every append: the header is assembled on the stack and the frame goes into
    /// `out` with three appends.
    @inline(__always)
    package static func encode(seq: UInt64, crc: UInt32, record: UnsafeRawBufferPointer, into out: inout [UInt8]) {
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 64) { header in
            let h = header.baseAddress!
            var i = 0
            @inline(__always) func put(_ b: UInt8) {
                h[i] = b
                i += 1
            }
            @inline(__always) func putDecimal(_ value: UInt64) {
                let n = digits(value)
                var v = value
                var k = i + n
                digitPairs.withUnsafeBufferPointer { pairs in
                    while v >= 100 {
                        let pair = Int(v % 100) * 2
                        v /= 100
                        k -= 2
                        h[k] = pairs[pair]
                        h[k + 1] = pairs[pair + 1]
                    }
                    if v >= 10 {
                        k -= 2
                        h[k] = pairs[Int(v) * 2]
                        h[k + 1] = pairs[Int(v) * 2 + 1]
                    } else {
                        k -= 1
                        h[k] = 0x30 + UInt8(truncatingIfNeeded: v)
                    }
                }
                i += n
            }
            // {"seq":
            put(0x7B); put(0x22); put(0x73); put(0x65); put(0x71); put(0x22); put(0x3A)
            putDecimal(seq)
            // ,"crc":
            put(0x2C); put(0x22); put(0x63); put(0x72); put(0x63); put(0x22); put(0x3A)
            putDecimal(UInt64(crc))
            // ,"event":
            put(0x2C); put(0x22); put(0x65); put(0x76); put(0x65); put(0x6E); put(0x74); put(0x22); put(0x3A)
            out.append(contentsOf: UnsafeBufferPointer(start: h, count: i))
        }
        out.append(contentsOf: record)
        out.append(0x7D)  // }
        out.append(newline)
    }

    /// The frame of `record` as a new array (tests and tools).
    package static func encode(seq: UInt64, record: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        record.withUnsafeBytes { encode(seq: seq, crc: CRC32C.checksum($0), record: $0, into: &out) }
        return out
    }

    /// Appends `value` in decimal without allocating.
    @inline(__always)
    static func appendDecimal(_ value: UInt64, to out: inout [UInt8]) {
        if value < 10 {
            out.append(0x30 + UInt8(value))
            return
        }
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { scratch in
            var v = value
            var i = 20
            while v > 0 {
                i -= 1
                scratch[i] = 0x30 + UInt8(v % 10)
                v /= 10
            }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: scratch[i..<20]))
        }
    }

    /// What one line (without its `\n`) holds.
    package enum Parsed: Equatable {
        /// A valid record: its sequence number and the byte range of its event inside the line's buffer.
        case record(seq: UInt64, event: Range<Int>)
        /// Not a valid record, with the reason.
        case corrupt(String)
    }

    /// Parses the line `line` (the bytes between two newlines) of `buffer`, checking the CRC.
    package static func parse(_ buffer: UnsafeRawBufferPointer, line: Range<Int>) -> Parsed {
        var i = line.lowerBound
        let end = line.upperBound
        func expect(_ literal: [UInt8]) -> Bool {
            guard end - i >= literal.count else { return false }
            for b in literal {
                if buffer[i] != b { return false }
                i += 1
            }
            return true
        }
        func number(max digits: Int) -> UInt64? {
            var v: UInt64 = 0
            let start = i
            while i < end, buffer[i] >= 0x30, buffer[i] <= 0x39 {
                let (m, o1) = v.multipliedReportingOverflow(by: 10)
                let (a, o2) = m.addingReportingOverflow(UInt64(buffer[i] - 0x30))
                if o1 || o2 { return nil }
                v = a
                i += 1
                if i - start > digits { return nil }
            }
            return i > start ? v : nil
        }
        if end - line.lowerBound > 0 && buffer[line.lowerBound] == 0 {
            return .corrupt("zero bytes instead of a record (a torn write or a zero-filled block)")
        }
        guard expect(seqPrefix), let seq = number(max: 20) else { return .corrupt("not a record: expected {\"seq\":N at the start of the line") }
        guard expect(crcPrefix), let crc = number(max: 10), crc <= UInt64(UInt32.max) else { return .corrupt("not a record: expected \"crc\" after the seq") }
        guard expect(eventPrefix) else { return .corrupt("not a record: expected \"event\" after the crc") }
        guard end - i >= 2, buffer[end - 1] == 0x7D else { return .corrupt("record \(seq) is cut short: it does not end with }") }
        let event = i..<(end - 1)
        let actual = CRC32C.checksum(UnsafeRawBufferPointer(rebasing: buffer[event]))
        guard actual == UInt32(crc) else { return .corrupt("record \(seq) fails its checksum (stored \(crc), computed \(actual)): the bytes changed on disk") }
        return .record(seq: seq, event: event)
    }
}
