import Testing
@testable import BeaconLog

/// The frame's numbers read eight digits at a time (`Frame.number`) give what a byte at a time
/// gives, for every digit count, what follows the digits, and every distance to the line's end.
@Suite struct FrameNumberTests {
    /// A deterministic generator (SplitMix64), so that a failure can be replayed.
    struct Mix {
        var state: UInt64
        mutating func next() -> UInt64 {
            state &+= 0x9E37_79B9_7F4A_7C15
            var z = state
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
        mutating func below(_ n: Int) -> Int { Int(next() % UInt64(n)) }
    }

    /// Bytes a number is followed by in a frame or in damaged data: digit neighbours in ASCII,
    /// the top-bit bytes, zero, and the frame's own separators.
    static let followers: [UInt8] = [0x2C, 0x2F, 0x3A, 0x00, 0x20, 0x7D, 0x80, 0xB0, 0xB9, 0xBA, 0xFF, 0x22, 0x0A, 0x40, 0x7F, 0x29]

    @Test("digits 0 to 22, any follower, any room to the end: the same value, position and refusal", arguments: [10, 20])
    func sameAsByteLoop(maxDigits: Int) {
        var random = Mix(state: UInt64(maxDigits))
        for round in 0..<20_000 {
            let count = round < 23 * 8 ? round % 23 : random.below(23)
            var bytes: [UInt8] = (0..<random.below(4)).map { _ in UInt8(ascii: "x") }
            let start = bytes.count
            // Leading zeros sometimes, and numbers near the 20-digit overflow.
            for k in 0..<count { bytes.append(k == 0 && count > 1 && random.below(4) == 0 ? 0x30 : UInt8(0x30 + random.below(10))) }
            if count == 20, random.below(2) == 0 { bytes.replaceSubrange(start..<start + 20, with: Array("1844674407370955161\(random.below(10))".utf8)) }
            bytes.append(Self.followers[random.below(Self.followers.count)])
            for _ in 0..<random.below(24) { bytes.append(UInt8(truncatingIfNeeded: random.next())) }
            let end = start + random.below(bytes.count - start + 1)
            bytes.withUnsafeBytes { raw in
                var fast = start, slow = start
                let a = Frame.number(raw, at: &fast, end: end, maxDigits: maxDigits)
                let b = Frame.numberByBytes(raw, at: &slow, end: end, maxDigits: maxDigits)
                #expect(a == b, "\(Array(bytes[start..<end])) max \(maxDigits)")
                if a != nil { #expect(fast == slow) }
            }
        }
    }

    @Test("every digit count at every alignment inside a valid frame parses to its seq and CRC")
    func framesRoundTrip() throws {
        var random = Mix(state: 7)
        for digits in 1...20 {
            for _ in 0..<50 {
                var seq = UInt64(1)
                for _ in 1..<digits { seq = seq &* 10 }
                seq = digits == 20 ? UInt64.max - UInt64(random.below(1000)) : seq + random.next() % (seq &* 9)
                let event = Array("{\"n\":\(random.below(1000))}".utf8)
                let pad = random.below(9)
                let bytes = [UInt8](repeating: 0x0A, count: pad) + Frame.encode(seq: seq, record: event)
                let parsed = bytes.withUnsafeBytes { Frame.parse($0, line: pad..<bytes.count - 1) }
                #expect(parsed == .record(seq: seq, event: (bytes.count - 2 - event.count)..<(bytes.count - 2)))
            }
        }
    }
}
