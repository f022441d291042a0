/// The numbers of a frame (`seq`, `crc`) read eight bytes at a time: every read parses two per
/// record, and a byte loop spends about ten instructions a digit.
extension Frame {
    /// The decimal number starting at `i` in `buffer` (before `end`), of at most `maxDigits`
    /// digits; `i` moves past it. Nil when there is no digit or more than `maxDigits` (`i` is then
    /// left anywhere). Up to 15 digits with 16 bytes left before `end` are read as two words
    /// (SWAR); anything else byte by byte, with the 20th digit checked for overflow.
    @inline(__always)
    static func number(_ buffer: UnsafeRawBufferPointer, at i: inout Int, end: Int, maxDigits: Int) -> UInt64? {
        if end - i >= 16 {
            let first = buffer.loadUnaligned(fromByteOffset: i, as: UInt64.self).littleEndian
            let n1 = leadingDigits(first)
            if n1 == 0 { return nil }
            if n1 < 8 {
                guard n1 <= maxDigits else { return nil }
                i += n1
                return eightDigits(first &<< UInt64(64 - 8 * n1))
            }
            let second = buffer.loadUnaligned(fromByteOffset: i + 8, as: UInt64.self).littleEndian
            let n2 = leadingDigits(second)
            if n2 < 8 {
                guard 8 + n2 <= maxDigits else { return nil }
                i += 8 + n2
                guard n2 > 0 else { return eightDigits(first) }
                var scale: UInt64 = 10
                for _ in 1..<n2 { scale &*= 10 }
                return eightDigits(first) &* scale &+ eightDigits(second &<< UInt64(64 - 8 * n2))
            }
        }
        return numberByBytes(buffer, at: &i, end: end, maxDigits: maxDigits)
    }

    /// ``number(_:at:end:maxDigits:)`` a byte at a time.
    @inline(__always)
    static func numberByBytes(_ buffer: UnsafeRawBufferPointer, at i: inout Int, end: Int, maxDigits digits: Int) -> UInt64? {
        var v: UInt64 = 0
        let start = i
        while i < end {
            let digit = buffer[i] &- 0x30
            guard digit <= 9 else { break }
            if i - start >= 19 {
                // The 20th digit may overflow; a 21st is never valid.
                guard i - start < digits else { return nil }
                let (m, o1) = v.multipliedReportingOverflow(by: 10)
                let (a, o2) = m.addingReportingOverflow(UInt64(digit))
                if o1 || o2 { return nil }
                v = a
            } else {
                guard i - start < digits else { return nil }
                v = v &* 10 &+ UInt64(digit)
            }
            i += 1
        }
        return i > start ? v : nil
    }

    /// How many of the word's bytes (little-endian, first byte lowest) are ASCII digits before the
    /// first that is not (8 when all are). A byte's top bit is set in `w + 0x46` when it is above
    /// `9` (or at or above 0x80) and in `w - 0x30` when it is below `0`; carries and borrows only
    /// start at a byte that is not a digit and only move up, so the bytes up to the first one that
    /// is not a digit are judged exactly.
    @inline(__always)
    static func leadingDigits(_ w: UInt64) -> Int {
        let flags = ((w &+ 0x4646_4646_4646_4646) | (w &- 0x3030_3030_3030_3030)) & 0x8080_8080_8080_8080
        return flags.trailingZeroBitCount >> 3
    }

    /// The value of eight ASCII digits (or zero bytes standing for leading zeros) in a word, the
    /// first digit in its lowest byte: pairs, then quadruples, then the whole, one multiply each.
    @inline(__always)
    static func eightDigits(_ w: UInt64) -> UInt64 {
        var v = w & 0x0F0F_0F0F_0F0F_0F0F
        v = (v &* 2561) >> 8
        v = ((v & 0x00FF_00FF_00FF_00FF) &* 6_553_601) >> 16
        return ((v & 0x0000_FFFF_0000_FFFF) &* 42_949_672_960_001) >> 32
    }
}
