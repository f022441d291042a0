import Foundation
import Testing
@testable import Beacon
import BeaconLog

enum RandomValues {
    static let pieces: [String] = ["", "\"", "\\", "\n", "\r\n", "\t", "\u{0}", "\u{1}", "\u{1F}", "\u{7F}", "é", "日本語", "🚀", "👩‍👩‍👧",
                                   "\u{2028}", "\u{2029}", "\u{FEFF}", "a", "book", " ", "/", "</script>", "\\u0000", "{\"k\":1}"]
    static let doubles: [Double] = [0, -0.0, 9.99, 1e20, 1e-7, .leastNonzeroMagnitude, -.leastNonzeroMagnitude, .greatestFiniteMagnitude, -.greatestFiniteMagnitude,
                                    .leastNormalMagnitude, 0.1 + 0.2, 123456789.123456789, 1e15, 1e16, -3.0, 2.5e-300]
    static let ints: [Int] = [0, 1, -1, .max, .min, 1_700_000_000_000, 9, 10, 99, 100]

    static func string(_ rng: inout SplitMix) -> String {
        var s = ""
        for _ in 0..<Int.random(in: 0...6, using: &rng) {
            if Bool.random(using: &rng) {
                s += pieces.randomElement(using: &rng)!
            } else {
                s.unicodeScalars.append(Unicode.Scalar(UInt32.random(in: 0...0x7F, using: &rng))!)
            }
        }
        return s
    }

    static func value(_ rng: inout SplitMix) -> PropertyValue {
        switch Int.random(in: 0..<9, using: &rng) {
        case 0: return .string(string(&rng))
        case 1: return .int(ints.randomElement(using: &rng)!)
        case 2: return .int(Int.random(in: .min ... .max, using: &rng))
        case 3: return .double(doubles.randomElement(using: &rng)!)
        case 4: return .double(Double(bitPattern: UInt64.random(in: 0 ... 0x7FEF_FFFF_FFFF_FFFF, using: &rng)) * (Bool.random(using: &rng) ? 1 : -1))
        case 5: return .bool(Bool.random(using: &rng))
        case 6: return .date(Date(timeIntervalSince1970: Double(Int64.random(in: Validation.dateRange, using: &rng)) / 1000))
        case 7: return .strings((0..<Int.random(in: 0...3, using: &rng)).map { _ in string(&rng) })
        default: return .null
        }
    }

    static func key(_ rng: inout SplitMix) -> String {
        let first = Array("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_")
        let rest = first + Array("0123456789$")
        var key = String(first.randomElement(using: &rng)!)
        for _ in 0..<Int.random(in: 0...20, using: &rng) { key.append(rest.randomElement(using: &rng)!) }
        return key
    }
}

/// The same text Foundation's formatter gives, for checking the hand-written date encoder.
let referenceFormatter: DateFormatter = {
    let formatter = DateFormatter()
    formatter.locale = Locale(identifier: "en_US_POSIX")
    formatter.timeZone = TimeZone(identifier: "UTC")
    formatter.calendar = Calendar(identifier: .gregorian)
    formatter.dateFormat = "yyyy-MM-dd HH:mm:ss.SSS"
    return formatter
}()

func expectSame(_ parsed: Any?, _ value: PropertyValue, key: String) {
    switch value {
    case .string(let s):
        #expect(parsed as? String == s, "key \(key)")
    case .int(let i):
        #expect((parsed as? NSNumber)?.int64Value == Int64(i), "key \(key): \(String(describing: parsed)) vs \(i)")
    case .double(let d):
        // swift-corelibs-foundation's JSONSerialization rounds some decimal texts to a
        // neighbouring double ("0.30000000000000004" → 0.3000000000000001); JSONDecoder is exact
        // and is checked separately for every double.
        let parsedDouble = (parsed as? NSNumber)?.doubleValue
        // It is off by up to a few ulps on ~14% of random doubles, so allow a relative 1e-12 (JSONDecoder must be exact).
        let close = parsedDouble.map { $0 == d || ($0 - d).magnitude <= d.magnitude * 1e-12 } ?? false
        #expect(close, "key \(key): \(String(describing: parsed)) vs \(d)")
    case .bool(let b):
        #expect(parsed as? Bool == b, "key \(key)")
    case .date(let date):
        let ms = JSONBytes.milliseconds(date)
        var out: [UInt8] = []
        JSONBytes.appendDate(millisecondsSince1970: ms, to: &out)
        #expect(parsed as? String == String(decoding: out.dropFirst().dropLast(), as: UTF8.self), "key \(key)")
        if ms >= -12_212_553_600_000 {
            #expect(parsed as? String == referenceFormatter.string(from: Date(timeIntervalSince1970: Double(ms) / 1000)), "key \(key)")
        }
    case .strings(let array):
        #expect(parsed as? [String] == array, "key \(key)")
    case .null:
        #expect(parsed is NSNull, "key \(key)")
    }
}

@Suite struct TrackerEncoderTests {
    /// Random property dictionaries: every record parses with Foundation's JSON parser to exactly
    /// the values tracked, and no byte below 0x20 (so no raw newline) is ever written.
    @Test func randomPropertiesRoundTripThroughFoundationsParser() async throws {
        try await withTrackerDirectoryOffPool { dir in
            let beacon = try Beacon(configuration: .testing(dir))
            var rng = SplitMix(state: 0x5EED)
            var tracked: [[String: PropertyValue]] = []
            for _ in 0..<600 {
                var properties: [String: PropertyValue] = [:]
                for _ in 0..<Int.random(in: 0...10, using: &rng) {
                    let key = RandomValues.key(&rng)
                    if key.hasPrefix("$") || Validation.reservedNames.contains(key) { continue }
                    properties[key] = RandomValues.value(&rng)
                }
                try beacon.validate("Random", properties: properties)
                beacon.track("Random", properties: properties)
                tracked.append(properties)
            }
            try beacon.sync()
            let raw = try readEventsWhileOpenRaw(beacon)
            #expect(raw.count == tracked.count)
            for (bytes, properties) in zip(raw, tracked) {
                #expect(!bytes.contains { $0 < 0x20 })
                let object = try #require(try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
                let parsed = try #require(object["properties"] as? [String: Any])
                #expect(parsed.count == properties.count + 5)
                for (key, value) in properties { expectSame(parsed[key], value, key: key) }
                let exact = try JSONDecoder().decode(DecodedRecord.self, from: Data(bytes))
                for (key, value) in properties {
                    if case .double(let d) = value {
                        #expect(exact.properties[key] == .number(d), "key \(key): exact \(String(describing: exact.properties[key])) vs \(d)")
                    }
                }
            }
            #expect(beacon.stats.invalid == 0)
            beacon.closeNow()
        }
    }

    /// Records larger than the encoder's stack buffer move to the heap, at every size around it.
    @Test func recordsGrowPastTheStackBuffer() async throws {
        try await withTrackerDirectoryOffPool { dir in
            let beacon = try Beacon(configuration: .testing(dir))
            var expected: [[String: PropertyValue]] = []
            for size in stride(from: 600, through: 3000, by: 7) {
                let text = String(repeating: "ab\"\n\u{1}é", count: size / 7)
                let properties: [String: PropertyValue] = ["text": .string(text), "n": .int(size), "list": .strings([text, ""])]
                beacon.track("Large", properties: properties)
                expected.append(properties)
            }
            try beacon.sync()
            let raw = try readEventsWhileOpenRaw(beacon)
            #expect(raw.count == expected.count)
            for (bytes, properties) in zip(raw, expected) {
                let object = try #require(try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
                let parsed = try #require(object["properties"] as? [String: Any])
                for (key, value) in properties { expectSame(parsed[key], value, key: key) }
            }
            beacon.closeNow()
        }
    }

    @Test func everyControlCharacterIsEscaped() throws {
        for scalar in (0...0x7F).compactMap(Unicode.Scalar.init) {
            let text = "a\(scalar)b"
            var out: [UInt8] = []
            JSONBytes.appendString(text, to: &out)
            #expect(!out.contains { $0 < 0x20 })
            let parsed = try JSONSerialization.jsonObject(with: Data(out), options: .fragmentsAllowed) as? String
            #expect(parsed == text, "U+\(String(scalar.value, radix: 16))")
            #expect(try JSONDecoder().decode(String.self, from: Data(out)) == text)
        }
        for text in ["\u{FEFF}", "\u{FEFF}é", "a\u{FEFF}", "\u{FEFF}\u{FEFF}x\u{FEFF}", "\u{FEFE}\u{FFFF}"] {
            var out: [UInt8] = []
            JSONBytes.appendString(text, to: &out)
            let parsed = try JSONSerialization.jsonObject(with: Data(out), options: .fragmentsAllowed) as? String
            #expect(parsed?.unicodeScalars.elementsEqual(text.unicodeScalars) == true, "\(Array(text.unicodeScalars))")
        }
    }

    @Test(arguments: RandomValues.doubles + [1e21, 1e22, 0.000001, 1.0 / 3.0, 4.35, 100, 1e14 + 0.5])
    func doublesAreValidJSONAndRoundTrip(_ value: Double) throws {
        var out: [UInt8] = []
        JSONBytes.appendDouble(value, to: &out)
        let text = String(decoding: out, as: UTF8.self)
        let parsed = try JSONSerialization.jsonObject(with: Data(out), options: .fragmentsAllowed) as? NSNumber
        #expect(parsed != nil, "\(text) is not JSON")
        let exact = try JSONDecoder().decode(Double.self, from: Data(out))
        #expect(exact == value, "\(text)")
        #expect(exact.sign == value.sign)
    }

    @Test func datesMatchFoundationsFormatterAcrossTheRange() {
        var rng = SplitMix(state: 7)
        let edges: [Int64] = [0, -1, 1, 86_399_999, 86_400_000, -86_400_001, 951_782_400_000 /* 2000-02-29 */, Validation.dateRange.lowerBound, Validation.dateRange.upperBound]
        // Foundation's Gregorian calendar is Julian before 1582-10-15; Beacon writes the proleptic
        // Gregorian calendar (as ISO 8601 does), so compare from 1583 on, and the early edges by hand.
        let from1583: ClosedRange<Int64> = -12_212_553_600_000 ... Validation.dateRange.upperBound
        let samples = edges.filter { from1583.contains($0) } + (0..<2000).map { _ in Int64.random(in: from1583, using: &rng) }
        for (ms, text) in [(Validation.dateRange.lowerBound, "0001-01-01 00:00:00.000"), (-62_104_147_200_000, "0001-12-31 00:00:00.000"), (-59_011_459_200_000, "0100-01-01 00:00:00.000")] {
            var out: [UInt8] = []
            JSONBytes.appendDate(millisecondsSince1970: ms, to: &out)
            #expect(String(decoding: out, as: UTF8.self) == "\"\(text)\"")
        }
        for ms in samples {
            var out: [UInt8] = []
            JSONBytes.appendDate(millisecondsSince1970: ms, to: &out)
            let expected = "\"" + referenceFormatter.string(from: Date(timeIntervalSince1970: Double(ms) / 1000)) + "\""
            #expect(String(decoding: out, as: UTF8.self) == expected, "ms \(ms)")
        }
    }

    @Test(arguments: [Int64(0), 1, 999, 1000, 1_500_250, -1, -1500, Int64.max, Int64.min])
    func durationsHaveExactlyThreeDecimals(_ micros: Int64) {
        var out: [UInt8] = []
        JSONBytes.appendThousandths(micros, to: &out)
        let text = String(decoding: out, as: UTF8.self)
        let parts = text.split(separator: ".")
        #expect(parts.count == 2 && parts[1].count == 3, "\(text)")
        #expect(Decimal(string: text) == Decimal(micros) / 1000)
    }

    /// The short-decimal fast path (up to three decimals) against Swift's own parser, for every
    /// value with up to three decimals around powers of ten, and random ones.
    @Test func shortDecimalsRoundTripExactly() throws {
        var rng = SplitMix(state: 99)
        var values: [Double] = []
        for decimals in 0...4 {
            for _ in 0..<3000 {
                let integer = Double(Int64.random(in: -10_000_000_000 ... 10_000_000_000, using: &rng))
                values.append(integer / pow(10, Double(decimals)))
            }
        }
        values += [0.001, 0.0011, 0.01, 0.1, 0.3, 0.7, 9.99, 19.99, 999_999_999_999.9, 1e12 - 0.001, 0.00099, 1e-3, 4.35, 2.675, 1.005]
        values += (0..<5000).map { _ in Double.random(in: -1e6 ... 1e6, using: &rng) }
        for value in values {
            var out: [UInt8] = []
            JSONBytes.appendDouble(value, to: &out)
            let text = String(decoding: out, as: UTF8.self)
            #expect(Double(text) == value, "\(value) written as \(text)")
            #expect(Double(text)?.sign == value.sign || value == 0)
            #expect(try JSONDecoder().decode(Double.self, from: Data(out)) == value)
        }
    }

    @Test func integersAtTheEdges() throws {
        var edges: [Int64] = [Int64.min, .max, 0, -1, 10, -10, 1_000_000_007, Int64.min + 1]
        var power: Int64 = 1
        for _ in 0..<19 {
            edges += [power - 1, power, power + 1, -power, -(power - 1)]
            power = power &* 10
        }
        var rng = SplitMix(state: 3)
        edges += (0..<1000).map { _ in Int64.random(in: .min ... .max, using: &rng) }
        for value in UInt64.max - 2 ... UInt64.max {
            var out: [UInt8] = []
            JSONBytes.appendUInt(value, to: &out)
            #expect(String(decoding: out, as: UTF8.self) == String(value))
        }
        for value in edges {
            var out: [UInt8] = []
            JSONBytes.appendInt(value, to: &out)
            #expect(String(decoding: out, as: UTF8.self) == String(value))
        }
    }
}

func readEventsWhileOpenRaw(_ beacon: Beacon) throws -> [[UInt8]] {
    var records: [[UInt8]] = []
    var cursor: LogPosition? = beacon.log.oldestPosition
    while true {
        let batch = try beacon.log.read(from: cursor, maxRecords: 10_000, maxBytes: 64 << 20)
        if batch.isEmpty { break }
        records += batch.records.map { Array($0) }
        cursor = batch.end
    }
    return records
}

/// A record decoded with JSONDecoder, whose number parsing is exact.
struct DecodedRecord: Decodable {
    var properties: [String: DecodedValue]
}

enum DecodedValue: Decodable, Equatable {
    case number(Double)
    case other

    init(from decoder: any Decoder) throws {
        let container = try decoder.singleValueContainer()
        if let bool = try? container.decode(Bool.self) { _ = bool; self = .other; return }
        if let double = try? container.decode(Double.self) { self = .number(double); return }
        self = .other
    }
}
