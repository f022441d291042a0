import Foundation
import Testing
@testable import BeaconLog

/// The one decimal writer (frames and the tracker's JSON) and the `Duration` conversions every
/// module uses.
@Suite struct NumberFormattingTests {
    /// Every power of ten and its neighbours, the extremes and seeded random values: the digit
    /// count and the digits written match `String(value)`.
    @Test func decimalDigitsMatchString() {
        var values: [UInt64] = [0, 1, 9, UInt64.max, UInt64.max - 1]
        var power: UInt64 = 10
        for _ in 1...19 {
            values += [power - 1, power, power + 1]
            power = power &* 10
        }
        var rng = SeededGenerator(seed: 0xD16175)
        values += (0..<1000).map { _ in rng.next() >> (rng.next() % 64) }
        for value in values {
            let count = DecimalDigits.count(value)
            #expect(count == String(value).count, "\(value)")
            let bytes = [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
                DecimalDigits.write(value, digits: count, to: buffer.baseAddress!)
                initialized = count
            }
            #expect(String(decoding: bytes, as: UTF8.self) == String(value))
        }
    }

    /// The eight-digit word (SWAR, no division past the first split): every value of each
    /// four-digit half with a varying other half, the edges, and seeded random values below 10^8.
    @Test func eightDigitsMatchString() {
        var rng = SeededGenerator(seed: 0x8888)
        var values: [UInt64] = [0, 1, 9, 10, 99, 100, 9_999, 10_000, 99_999_999, 10_000_001, 43_699, 43_698]
        for half in 0..<UInt64(10_000) {
            values += [half * 10_000 + (half * 7_919) % 10_000, ((half * 6_007) % 10_000) * 10_000 + half]
        }
        values += (0..<20_000).map { _ in rng.next() % 100_000_000 }
        for value in values {
            let word = DecimalDigits.eight(value).littleEndian
            let text = withUnsafeBytes(of: word) { String(decoding: $0, as: UTF8.self) }
            let expected = String(value)
            #expect(text == String(repeating: "0", count: 8 - expected.count) + expected)
        }
    }

    @Test(arguments: [
        (Duration.zero, Int64(0)),
        (.nanoseconds(1), 1),
        (.nanoseconds(-1), -1),
        (.milliseconds(1500), 1_500_000_000),
        (.milliseconds(-1500), -1_500_000_000),
        (.seconds(9_223_372_036), 9_223_372_036_000_000_000),
        (.seconds(9_223_372_037), Int64.max),
        (.seconds(-9_223_372_037), Int64.min),
        (.seconds(Int64.max), Int64.max),
    ])
    func durationNanosecondsTruncateAndSaturate(duration: Duration, expected: Int64) {
        #expect(duration.nanoseconds == expected)
    }

    @Test func durationNanosecondsTruncateTowardZero() {
        let almostTwo = Duration.nanoseconds(1) + .init(secondsComponent: 0, attosecondsComponent: 999_999_999)
        #expect(almostTwo.nanoseconds == 1)
        #expect((.zero - almostTwo).nanoseconds == -1)
    }

    @Test func durationSeconds() {
        #expect(Duration.milliseconds(1500).seconds == 1.5)
        #expect(Duration.milliseconds(-250).seconds == -0.25)
        #expect(Duration.zero.seconds == 0)
        #expect(Duration.seconds(86_400).seconds == 86_400)
    }
}
