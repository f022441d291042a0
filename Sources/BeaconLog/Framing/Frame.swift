import Glibc

/// The framing of one record: `{"seq":N,"crc":C,"event":<record>}\n`, one JSON line per record,
/// where C is the CRC-32C of the event bytes.
///
/// The key order is fixed so that a reader finds the event bytes without a JSON parser.
package enum Frame {
    // Constants as StaticString and tuples: statically initialised, so the hot paths pay no
    // `swift_once` check (arrays in statics are lazily allocated and checked on every access).
    static let seqPrefix: StaticString = #"{"seq":"#
    static let crcPrefix: StaticString = #","crc":"#
    static let eventPrefix: StaticString = #","event":"#

    /// The framing bytes a record of `count` bytes takes on disk at most (without its digits' exact count).
    package static let maxOverhead = 7 + 20 + 7 + 10 + 9 + 2  // 55

    /// The exact length of the frame of a record of `count` bytes with this seq and CRC.
    @inline(__always)
    package static func length(seq: UInt64, crc: UInt32, count: Int) -> Int {
        length(seqDigits: digits(seq), crcDigits: digits(UInt64(crc)), count: count)
    }

    /// The exact length of the frame of a record of `count` bytes whose seq and CRC have these
    /// numbers of decimal digits: `{"seq":` (7), `,"crc":` (7), `,"event":` (9), `}` and `\n`.
    @inline(__always)
    package static func length(seqDigits: Int, crcDigits: Int, count: Int) -> Int {
        25 + seqDigits + crcDigits + count
    }

    /// The number of decimal digits of `value`.
    @inline(__always)
    package static func digits(_ value: UInt64) -> Int { DecimalDigits.count(value) }

    /// Writes the frame of `record` (whose CRC-32C is `crc`) with sequence number `seq` at `p`,
    /// which has room for `length(seq:crc:count:)` bytes; `seqDigits` and `crcDigits` are the
    /// numbers' decimal digit counts, which the caller computed for the length already.
    ///
    /// The hot path of every append: word stores and one `memcpy`, no bounds or uniqueness checks.
    /// A number below 10^8 is written as one 8-byte word of digits ending where the number ends;
    /// the word's leading zeros land on the key before it, which is written afterwards.
    @inline(__always)
    static func write(seq: UInt64, crc: UInt32, seqDigits: Int, crcDigits: Int, record: UnsafeRawBufferPointer, to p: UnsafeMutableRawPointer) {
        // {"seq":N
        if seq < 100_000_000 {
            p.storeBytes(of: DecimalDigits.eight(seq).littleEndian, toByteOffset: seqDigits - 1, as: UInt64.self)
        } else {
            DecimalDigits.write(seq, digits: seqDigits, to: (p + 7).assumingMemoryBound(to: UInt8.self))
        }
        p.storeBytes(of: UInt32(0x6573_227B).littleEndian, as: UInt32.self)  // {"se
        p.storeBytes(of: UInt32(0x3A22_7165).littleEndian, toByteOffset: 3, as: UInt32.self)  // eq":
        // ,"crc":C
        let c = p + 7 + seqDigits
        let value = UInt64(crc)
        if value < 100_000_000 {
            c.storeBytes(of: DecimalDigits.eight(value).littleEndian, toByteOffset: crcDigits - 1, as: UInt64.self)
        } else {
            // 9 or 10 digits: the first one or two, then eight.
            let high = value / 100_000_000
            c.storeBytes(of: DecimalDigits.eight(value - high * 100_000_000).littleEndian, toByteOffset: crcDigits - 1, as: UInt64.self)
            if crcDigits == 10 {
                let pairs = DecimalDigits.pairs.utf8Start
                c.storeBytes(of: pairs[Int(high) * 2], toByteOffset: 7, as: UInt8.self)
                c.storeBytes(of: pairs[Int(high) * 2 + 1], toByteOffset: 8, as: UInt8.self)
            } else {
                c.storeBytes(of: 0x30 + UInt8(truncatingIfNeeded: high), toByteOffset: 7, as: UInt8.self)
            }
        }
        c.storeBytes(of: UInt32(0x7263_222C).littleEndian, as: UInt32.self)  // ,"cr
        c.storeBytes(of: UInt32(0x3A22_6372).littleEndian, toByteOffset: 3, as: UInt32.self)  // rc":
        // ,"event":<record>}\n
        let e = c + 7 + crcDigits
        e.storeBytes(of: UInt64(0x2274_6E65_7665_222C).littleEndian, as: UInt64.self)  // ,"event"
        e.storeBytes(of: 0x3A, toByteOffset: 8, as: UInt8.self)  // :
        if let source = record.baseAddress { (e + 9).copyMemory(from: source, byteCount: record.count) }
        e.storeBytes(of: UInt16(0x0A7D).littleEndian, toByteOffset: 9 + record.count, as: UInt16.self)  // }\n
    }

    /// Appends the frame of `record` (whose CRC-32C is `crc`) with sequence number `seq` to `out`.
    package static func encode(seq: UInt64, crc: UInt32, record: UnsafeRawBufferPointer, into out: inout [UInt8]) {
        let seqDigits = digits(seq)
        let crcDigits = digits(UInt64(crc))
        let count = length(seqDigits: seqDigits, crcDigits: crcDigits, count: record.count)
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
        /// Not a valid record: what is wrong, for people, and the reason it is counted under
        /// (`.zeros`, `.malformed`, `.checksum`).
        case corrupt(String, reason: CorruptionReason)
    }

    /// Parses the line `line` (the bytes between two newlines) of `buffer`, checking the CRC.
    package static func parse(_ buffer: UnsafeRawBufferPointer, line: Range<Int>) -> Parsed {
        var crc: UInt32 = 0
        return parse(buffer, line: line, crc: &crc)
    }

    /// ``parse(_:line:)``, also giving a record's checksum (checked) in `crc`.
    package static func parse(_ buffer: UnsafeRawBufferPointer, line: Range<Int>, crc checked: inout UInt32) -> Parsed {
        var i = line.lowerBound
        let end = line.upperBound
        // Read once per record on every read: no libc call, numbers eight digits at a time
        // (``number(_:at:end:maxDigits:)``), no overflow check until a number could overflow.
        // The keys are compared a word at a time: `word` holds the literal's first (up to) eight
        // bytes, little-endian, `last` its ninth if it has one. A valid line always has eight
        // bytes or more from where a key starts.
        @inline(__always) func expect(_ literal: StaticString, word: UInt64, last: UInt8? = nil) -> Bool {
            let count = literal.utf8CodeUnitCount
            guard end - i >= max(count, 8) else { return false }
            let mask: UInt64 = count >= 8 ? ~0 : (1 << (8 * UInt64(count))) &- 1
            guard buffer.loadUnaligned(fromByteOffset: i, as: UInt64.self).littleEndian & mask == word else { return false }
            if let last, buffer[i + 8] != last { return false }
            i += count
            return true
        }
        @inline(__always) func number(max digits: Int) -> UInt64? {
            Self.number(buffer, at: &i, end: end, maxDigits: digits)
        }
        if end - line.lowerBound > 0 && buffer[line.lowerBound] == 0 {
            return .corrupt("zero bytes instead of a record (a torn write or a zero-filled block)", reason: .zeros)
        }
        guard expect(seqPrefix, word: 0x3A22_7165_7322_7B), let seq = number(max: 20) else { return .corrupt("not a record: expected {\"seq\":N at the start of the line", reason: .malformed) }
        guard expect(crcPrefix, word: 0x3A22_6372_6322_2C), let crc = number(max: 10), crc <= UInt64(UInt32.max) else { return .corrupt("not a record: expected \"crc\" after the seq", reason: .malformed) }
        guard expect(eventPrefix, word: 0x2274_6E65_7665_222C, last: 0x3A) else { return .corrupt("not a record: expected \"event\" after the crc", reason: .malformed) }
        guard end - i >= 2, buffer[end - 1] == 0x7D else { return .corrupt("record \(seq) is cut short: it does not end with }", reason: .malformed) }
        let event = i..<(end - 1)
        let actual = CRC32C.checksum(UnsafeRawBufferPointer(rebasing: buffer[event]))
        guard actual == UInt32(crc) else { return .corrupt("record \(seq) fails its checksum (stored \(crc), computed \(actual)): the bytes changed on disk", reason: .checksum) }
        checked = actual
        return .record(seq: seq, event: event)
    }
}
