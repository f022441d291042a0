import Glibc

/// The framing of one record: `{"seq":N,"crc":C,"event":<record>}\n` (DESIGN §2).
///
/// The key order is fixed so that a reader finds the event bytes without a JSON parser.
package enum Frame {
    // Constants as StaticString and tuples: statically initialised, so the hot paths pay no
    // `swift_once` check (arrays in statics are lazily allocated and checked on every access).
    static let seqPrefix: StaticString = #"{"seq":"#
    static let crcPrefix: StaticString = #","crc":"#
    static let eventPrefix: StaticString = #","event":"#
    static let newline: UInt8 = 0x0A

    /// The framing bytes a record of `count` bytes takes on disk at most (without its digits' exact count).
    package static let maxOverhead = 7 + 20 + 7 + 10 + 9 + 2  // 55

    /// The exact length of the frame of a record of `count` bytes with this seq and CRC.
    @inline(__always)
    package static func length(seq: UInt64, crc: UInt32, count: Int) -> Int {
        25 + digits(seq) + digits(UInt64(crc)) + count  // {"seq": ,"crc": ,"event": }\n
    }

    /// 10^k for k in 0...19, for counting digits without dividing (a switch the compiler turns
    /// into a constant lookup table).
    @inline(__always)
    static func powerOfTen(_ k: Int) -> UInt64 {
        switch k {
        case 0: 1
        case 1: 10
        case 2: 100
        case 3: 1_000
        case 4: 10_000
        case 5: 100_000
        case 6: 1_000_000
        case 7: 10_000_000
        case 8: 100_000_000
        case 9: 1_000_000_000
        case 10: 10_000_000_000
        case 11: 100_000_000_000
        case 12: 1_000_000_000_000
        case 13: 10_000_000_000_000
        case 14: 100_000_000_000_000
        case 15: 1_000_000_000_000_000
        case 16: 10_000_000_000_000_000
        case 17: 100_000_000_000_000_000
        case 18: 1_000_000_000_000_000_000
        default: 10_000_000_000_000_000_000
        }
    }

    /// The number of decimal digits of `value`: from its bit length, corrected by one comparison.
    @inline(__always)
    static func digits(_ value: UInt64) -> Int {
        let bits = 64 - (value | 1).leadingZeroBitCount
        let guess = (bits * 1233) >> 12  // ≈ bits × log10(2), at most 19
        if value == 0 { return 1 }
        return value >= powerOfTen(guess) ? guess + 1 : guess
    }

    /// "00" … "99": two digits per division when writing numbers.
    static let digitPairs: StaticString = """
        00010203040506070809101112131415161718192021222324252627282930313233343536373839\
        40414243444546474849505152535455565758596061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899
        """

    /// Writes the frame of `record` (whose CRC-32C is `crc`) with sequence number `seq` at `p`,
    /// which has room for `length(seq:crc:count:)` bytes; `seqDigits` and `crcDigits` are the
    /// numbers' decimal digit counts, which the caller computed for the length already.
    ///
    /// The hot path of every append: one pass of stores and one `memcpy`, no bounds or
    /// uniqueness checks.
    @inline(__always)
    static func write(seq: UInt64, crc: UInt32, seqDigits: Int, crcDigits: Int, record: UnsafeRawBufferPointer, to p: UnsafeMutableRawPointer) {
        let h = p.assumingMemoryBound(to: UInt8.self)
        do {
            let pairs = digitPairs.utf8Start
            @inline(__always) func putDecimal(_ value: UInt64, digits n: Int, at start: Int) {
                var v = value
                var k = start + n
                while v >= 100 {
                    let pair = Int(v % 100) * 2
                    v /= 100
                    k -= 2
                    h[k] = pairs[pair]
                    h[k + 1] = pairs[pair + 1]
                }
                if v >= 10 {
                    h[k - 2] = pairs[Int(v) * 2]
                    h[k - 1] = pairs[Int(v) * 2 + 1]
                } else {
                    h[k - 1] = 0x30 + UInt8(truncatingIfNeeded: v)
                }
            }
            // {"seq":N,"crc":C,"event":
            h[0] = 0x7B; h[1] = 0x22; h[2] = 0x73; h[3] = 0x65; h[4] = 0x71; h[5] = 0x22; h[6] = 0x3A
            putDecimal(seq, digits: seqDigits, at: 7)
            var i = 7 + seqDigits
            h[i] = 0x2C; h[i + 1] = 0x22; h[i + 2] = 0x63; h[i + 3] = 0x72; h[i + 4] = 0x63; h[i + 5] = 0x22; h[i + 6] = 0x3A
            putDecimal(UInt64(crc), digits: crcDigits, at: i + 7)
            i += 7 + crcDigits
            h[i] = 0x2C; h[i + 1] = 0x22; h[i + 2] = 0x65; h[i + 3] = 0x76; h[i + 4] = 0x65
            h[i + 5] = 0x6E; h[i + 6] = 0x74; h[i + 7] = 0x22; h[i + 8] = 0x3A
            i += 9
            if let source = record.baseAddress { (p + i).copyMemory(from: source, byteCount: record.count) }
            i += record.count
            h[i] = 0x7D  // }
            h[i + 1] = newline
        }
    }

    /// Appends the frame of `record` (whose CRC-32C is `crc`) with sequence number `seq` to `out`.
    package static func encode(seq: UInt64, crc: UInt32, record: UnsafeRawBufferPointer, into out: inout [UInt8]) {
        let seqDigits = digits(seq)
        let crcDigits = digits(UInt64(crc))
        let count = 25 + seqDigits + crcDigits + record.count
        out += [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            write(seq: seq, crc: crc, seqDigits: seqDigits, crcDigits: crcDigits, record: record, to: UnsafeMutableRawPointer(buffer.baseAddress!))
            initialized = count
        }
    }

    /// The frame of `record` as a new array (tests and tools).
    package static func encode(seq: UInt64, record: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        record.withUnsafeBytes { encode(seq: seq, crc: CRC32C.checksum($0), record: $0, into: &out) }
        return out
    }

    /// What one line (without its `\n`) holds.
    package enum Parsed: Equatable {
        /// A valid record: its sequence number and the byte range of its event inside the line's buffer.
        case record(seq: UInt64, event: Range<Int>)
        /// Not a valid record: what is wrong, for people, and the reason's key for counting
        /// (`"zeros"`, `"malformed"`, `"checksum"`).
        case corrupt(String, reason: String)
    }

    /// Parses the line `line` (the bytes between two newlines) of `buffer`, checking the CRC.
    package static func parse(_ buffer: UnsafeRawBufferPointer, line: Range<Int>) -> Parsed {
        var i = line.lowerBound
        let end = line.upperBound
        func expect(_ literal: StaticString) -> Bool {
            let count = literal.utf8CodeUnitCount
            guard end - i >= count else { return false }
            guard memcmp(buffer.baseAddress! + i, literal.utf8Start, count) == 0 else { return false }
            i += count
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
            return .corrupt("zero bytes instead of a record (a torn write or a zero-filled block)", reason: "zeros")
        }
        guard expect(seqPrefix), let seq = number(max: 20) else { return .corrupt("not a record: expected {\"seq\":N at the start of the line", reason: "malformed") }
        guard expect(crcPrefix), let crc = number(max: 10), crc <= UInt64(UInt32.max) else { return .corrupt("not a record: expected \"crc\" after the seq", reason: "malformed") }
        guard expect(eventPrefix) else { return .corrupt("not a record: expected \"event\" after the crc", reason: "malformed") }
        guard end - i >= 2, buffer[end - 1] == 0x7D else { return .corrupt("record \(seq) is cut short: it does not end with }", reason: "malformed") }
        let event = i..<(end - 1)
        let actual = CRC32C.checksum(UnsafeRawBufferPointer(rebasing: buffer[event]))
        guard actual == UInt32(crc) else { return .corrupt("record \(seq) fails its checksum (stored \(crc), computed \(actual)): the bytes changed on disk", reason: "checksum") }
        return .record(seq: seq, event: event)
    }
}
