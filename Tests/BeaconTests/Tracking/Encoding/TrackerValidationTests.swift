import Foundation
import Testing
@testable import Beacon

struct ValidationCase: Sendable, CustomStringConvertible {
    var event: String
    var properties: [String: PropertyValue]
    var distinctId: String?
    var rule: BeaconValidationError.Code?
    var key: String?
    var description: String { "\(event) \(properties.keys.sorted()) → \(rule?.name ?? "valid")" }

    init(_ event: String, _ properties: [String: PropertyValue] = [:], distinctId: String? = nil, rule: BeaconValidationError.Code?, key: String? = nil) {
        self.event = event
        self.properties = properties
        self.distinctId = distinctId
        self.rule = rule
        self.key = key
    }
}

let longName = String(repeating: "a", count: 100)
let validationCases: [ValidationCase] = [
    .init("Purchase", ["price": 9.99], rule: nil),
    .init("_private", ["_k": 1, "k2": "v", "a$b": true], rule: nil),
    .init(longName, [longName: 1], rule: nil),
    .init("", rule: .identifier),
    .init(longName + "a", rule: .identifier),
    .init("9lives", rule: .identifier),
    .init("has space", rule: .identifier),
    .init("dash-ed", rule: .identifier),
    .init("ünïcode", rule: .identifier),
    .init("$AppStart", rule: .reservedPrefix),
    .init("$Custom", rule: .reservedPrefix),
    .init("time", rule: .reservedName),
    .init("distinct_id", rule: .reservedName),
    .init("Ok", ["": 1], rule: .identifier, key: ""),
    .init("Ok", [longName + "b": 1], rule: .identifier, key: longName + "b"),
    .init("Ok", ["1st": 1], rule: .identifier, key: "1st"),
    .init("Ok", ["a.b": 1], rule: .identifier, key: "a.b"),
    .init("Ok", ["new\nline": 1], rule: .identifier, key: "new\nline"),
    .init("Ok", ["$custom": 1], rule: .reservedPrefix, key: "$custom"),
    .init("Ok", ["$event_duration": 1], rule: .reservedPrefix, key: "$event_duration"),
    .init("Ok", ["$app_version": "9"], rule: nil),
    .init("Ok", ["$os": "Plan9"], rule: nil),
    .init("Ok", ["event": "x"], rule: .reservedName, key: "event"),
    .init("Ok", ["properties": 1], rule: .reservedName, key: "properties"),
    .init("Ok", ["_track_id": 1], rule: .reservedName, key: "_track_id"),
    .init("Ok", ["nan": .double(.nan)], rule: .nonFiniteNumber, key: "nan"),
    .init("Ok", ["inf": .double(.infinity)], rule: .nonFiniteNumber, key: "inf"),
    .init("Ok", ["ninf": .double(-.infinity)], rule: .nonFiniteNumber, key: "ninf"),
    .init("Ok", ["max": .double(.greatestFiniteMagnitude)], rule: nil),
    .init("Ok", ["s": .string(String(repeating: "x", count: 8192))], rule: nil),
    .init("Ok", ["s": .string(String(repeating: "x", count: 8193))], rule: .stringTooLong, key: "s"),
    .init("Ok", ["s": .string(String(repeating: "é", count: 4097))], rule: .stringTooLong, key: "s"),
    .init("Ok", ["a": .strings(["ok", String(repeating: "x", count: 8193)])], rule: .stringTooLong, key: "a"),
    .init("Ok", ["d": .date(Date(timeIntervalSince1970: -62_135_596_800))], rule: nil),
    .init("Ok", ["d": .date(Date(timeIntervalSince1970: -62_135_596_800.001))], rule: .dateOutOfRange, key: "d"),
    .init("Ok", ["d": .date(Date(timeIntervalSince1970: 253_402_300_800))], rule: .dateOutOfRange, key: "d"),
    .init("Ok", ["d": .date(.distantFuture)], rule: nil),
    .init("Ok", ["d": .date(Date(timeIntervalSince1970: 1e15))], rule: .dateOutOfRange, key: "d"),
    .init("Ok", distinctId: "", rule: .invalidIdentity),
    .init("Ok", distinctId: String(repeating: "u", count: 256), rule: .invalidIdentity),
    .init("Ok", distinctId: String(repeating: "u", count: 255), rule: nil),
    .init("Ok", distinctId: "user \"quoted\"\n", rule: nil),
]

@Suite struct TrackerValidationTests {
    @Test(arguments: validationCases)
    func validationTable(_ c: ValidationCase) async throws {
        try await withTrackerDirectoryOffPool { dir in
            let diagnostics = DiagnosticsCollector()
            let beacon = try Beacon(configuration: .testing(dir, diagnostics: diagnostics))
            if let rule = c.rule {
                let error = #expect(throws: BeaconValidationError.self) {
                    try beacon.validate(c.event, properties: c.properties, distinctId: c.distinctId)
                }
                #expect(error?.code == rule)
                #expect(error?.key == c.key)
                #expect(error?.event == c.event)
            } else {
                try beacon.validate(c.event, properties: c.properties, distinctId: c.distinctId)
            }
            beacon.track(c.event, properties: c.properties, distinctId: c.distinctId)
            let records = try events(of: beacon)
            let stats = beacon.stats
            if let rule = c.rule {
                #expect(records.isEmpty)
                #expect(stats.invalid == 1)
                #expect(stats.invalidByRule[rule] == 1)
                #expect(stats.tracked == 0)
                let diagnostic = try #require(diagnostics.all.first)
                #expect(diagnostic.kind == .invalidInput)
                #expect(diagnostic.validation?.code == rule)
                #expect(diagnostic.message.contains(rule.name))
                #expect(diagnostic.message.contains("\"\(c.event)\""))
                if let key = c.key { #expect(diagnostic.message.contains("\"\(key)\"")) }
            } else {
                #expect(records.count == 1)
                #expect(stats.invalid == 0)
                #expect(stats.tracked == 1)
                #expect(diagnostics.all.isEmpty)
            }
            beacon.closeNow()
        }
    }

    @Test func theReservedCheckMatchesTheListExactly() {
        func reserved(_ name: String) -> Bool {
            var name = name
            return name.withUTF8 { Validation.isReserved($0) }
        }
        for name in Validation.reservedNames {
            #expect(reserved(name), "\(name)")
            for near in [name + "x", String(name.dropLast()), name.uppercased()] where !Validation.reservedNames.contains(near) {
                #expect(!reserved(near), "\(near)")
            }
            var changed = Array(name.utf8)
            changed[changed.count - 1] ^= 0x01
            #expect(!reserved(String(decoding: changed, as: UTF8.self)), "near \(name)")
        }
        for name in ["", "i", "ids", "item", "price", "dates", "timer", "userid", "_track", "propertie"] { #expect(!reserved(name), "\(name)") }
    }

    @Test func anInvalidEventLosesNothingElse() async throws {
        try await withTrackerDirectoryOffPool { dir in
            let beacon = try Beacon(configuration: .testing(dir))
            beacon.track("A", properties: ["n": 1])
            beacon.track("B", properties: ["n": .double(.nan)])
            beacon.track("C", properties: ["n": 3])
            let names = try events(of: beacon).map { $0["event"] as? String }
            #expect(names == ["A", "C"])
            #expect(beacon.stats.invalid == 1)
            beacon.closeNow()
        }
    }

    @Test func recordsLargerThanTheLogAcceptsAreRefusedNotDropped() async throws {
        try await withTrackerDirectoryOffPool { dir in
            var config = Beacon.Configuration.testing(dir)
            config.storage.maxRecordBytes = 4096
            let beacon = try Beacon(configuration: config)
            var properties: [String: PropertyValue] = [:]
            for i in 0..<5 { properties["k\(i)"] = .string(String(repeating: "x", count: 1000)) }
            beacon.track("Big", properties: properties)
            beacon.track("Small")
            #expect(try events(of: beacon).map { $0["event"] as? String } == ["Small"])
            #expect(beacon.stats.invalidByRule[.recordTooLarge] == 1)
            #expect(beacon.stats.droppedTotal == 0)
            beacon.closeNow()
        }
    }
}
