/// Segment file names: a 20-digit, zero-padded 64-bit number and `.jsonl`.
package enum SegmentName {
    /// `fileName(7) == "00000000000000000007.jsonl"`.
    package static func fileName(_ number: UInt64) -> String {
        let digits = String(number)
        return String(repeating: "0", count: max(0, 20 - digits.count)) + digits + ".jsonl"
    }

    /// The number in a segment file name, or nil if `name` is not one.
    package static func parse(_ name: String) -> UInt64? {
        let utf8 = name.utf8
        guard utf8.count == 26, name.hasSuffix(".jsonl") else { return nil }
        let digits = utf8.prefix(20)
        guard digits.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }) else { return nil }
        return UInt64(String(decoding: digits, as: UTF8.self))
    }
}
