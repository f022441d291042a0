import BeaconTestSupport

/// Where an event comes from: `beacon append` (delivered by `beacon send`) or the tracker child.
enum ChaosSource: String, CaseIterable, Sendable {
    case sidecar, tracker

    /// The collector's path for this source.
    var path: String { "/" + rawValue }
}

/// The events of a run, derived from the seed and the event's id alone, so that the harness can
/// rebuild any event's exact bytes at the collector without keeping them, and knows which ids
/// are poison (refused with 400 by the collector, whatever else it does).
struct ChaosEvents: Sendable {
    let seed: UInt64

    /// The sidecar's event `id`: one JSON line of 170 to 8,100 bytes, with escapes and non-ASCII
    /// text whose bytes must reach the collector unchanged. About 4 KB on average.
    func sidecarLine(_ id: UInt64) -> [UInt8] {
        var generator = SplitMix(seed: Self.mix(seed ^ Self.mix(id)))
        let padLength = 40 + Int(generator.next() % 8000)
        var line = Array(#"{"cid":\#(id),"src":"sidecar","text":"tab\t é 😀 \"quoted\" \\ \u0001","pad":""#.utf8)
        line.reserveCapacity(line.count + padLength + 2)
        var bits = generator.next()
        for index in 0..<padLength {
            if index % 12 == 0 { bits = generator.next() }
            line.append(UInt8(ascii: "a") + UInt8(bits % 26))
            bits /= 26
        }
        line += Array(#""}"#.utf8)
        return line
    }

    /// Whether the collector refuses event `id` of `source` with 400: about one in 2,500.
    func isPoison(_ id: UInt64, _ source: ChaosSource) -> Bool {
        Self.mix(seed &+ Self.mix(id &+ (source == .sidecar ? 0x5ead : 0x7ac4))) % 2500 == 0
    }

    /// SplitMix64's finalizer: a well-mixed 64-bit hash of `x`.
    static func mix(_ x: UInt64) -> UInt64 {
        var z = x &+ 0x9E37_79B9_7F4A_7C15
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }

    /// The number after the first `"cid":` in `bytes`, the event's id (nil when there is none).
    static func id<C: Collection>(in bytes: C) -> UInt64? where C.Element == UInt8, C.Index == Int {
        let key = Array(#""cid":"#.utf8)
        var start = bytes.startIndex
        while start + key.count <= bytes.endIndex {
            if bytes[start] == key[0] && bytes[start..<(start + key.count)].elementsEqual(key) {
                var value: UInt64 = 0
                var index = start + key.count
                var digits = 0
                while index < bytes.endIndex, bytes[index] >= 0x30, bytes[index] <= 0x39 {
                    value = value &* 10 &+ UInt64(bytes[index] - 0x30)
                    index += 1
                    digits += 1
                }
                return digits > 0 ? value : nil
            }
            start += 1
        }
        return nil
    }
}
