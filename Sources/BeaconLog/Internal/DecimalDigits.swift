/// Unsigned integers in decimal, written in place two digits at a time: the one digit writer of
/// the log's frames and the tracker's JSON.
package enum DecimalDigits {
    /// "00" … "99": two digits per division. A literal returned by an inlinable getter, so the
    /// hot paths in other modules (the tracker's JSON) read constant data with no `swift_once`
    /// check, as they would for a stored `static let` of another module.
    @inlinable
    static var pairs: StaticString {
        """
        00010203040506070809101112131415161718192021222324252627282930313233343536373839\
        40414243444546474849505152535455565758596061626364656667686970717273747576777879\
        8081828384858687888990919293949596979899
        """
    }

    /// 10^k for k in 0...19, for counting digits without dividing (a switch the compiler turns
    /// into a constant lookup table).
    @inlinable @inline(__always)
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
    @inlinable @inline(__always)
    package static func count(_ value: UInt64) -> Int {
        let bits = 64 - (value | 1).leadingZeroBitCount
        let guess = (bits * 1233) >> 12  // ≈ bits × log10(2), at most 19
        if value == 0 { return 1 }
        return value >= powerOfTen(guess) ? guess + 1 : guess
    }

    /// The eight decimal digits of `value` (below 10^8, with leading zeros) as ASCII bytes in
    /// one word, the first digit in the lowest byte: a store of `littleEndian` writes them in
    /// order. Division-free past the first split (SWAR: both halves of each split at once).
    @inlinable @inline(__always)
    package static func eight(_ value: UInt64) -> UInt64 {
        // Two lanes of 32 bits: the high four digits, then the low four.
        var x = value / 10_000 | (value % 10_000) << 32
        // Each lane (< 10^4) into two 16-bit lanes: x / 100 (by 10486 / 2^20, exact below 43,699), x % 100.
        var q = (x &* 10_486) >> 20 & 0x0000_007F_0000_007F
        x = q | (x &- q &* 100) << 16
        // Each 16-bit lane (< 100) into two bytes: x / 10 (by 103 / 2^10, exact below 179), x % 10.
        q = (x &* 103) >> 10 & 0x000F_000F_000F_000F
        x = q | (x &- q &* 10) << 8
        return x | 0x3030_3030_3030_3030
    }

    /// Writes the `digits` decimal digits of `value` (as ``count(_:)`` gives them) at `start`,
    /// which has room for them. No bounds checks: the hot paths of append and encode.
    @inlinable @inline(__always)
    package static func write(_ value: UInt64, digits: Int, to start: UnsafeMutablePointer<UInt8>) {
        let pairs = Self.pairs.utf8Start
        var v = value
        var k = digits
        while v >= 100 {
            let pair = Int(truncatingIfNeeded: v % 100) * 2
            v /= 100
            k -= 2
            start[k] = pairs[pair]
            start[k + 1] = pairs[pair + 1]
        }
        if v >= 10 {
            let pair = Int(truncatingIfNeeded: v) * 2
            start[k - 2] = pairs[pair]
            start[k - 1] = pairs[pair + 1]
        } else {
            start[k - 1] = 0x30 + UInt8(truncatingIfNeeded: v)
        }
    }
}
