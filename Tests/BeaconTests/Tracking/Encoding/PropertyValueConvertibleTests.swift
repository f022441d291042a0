import Foundation
import Testing
@testable import Beacon

/// Variables of the usual types are properties without `.int(n)` wrapping, and make the same
/// record as the literal or wrapped form.
@Suite struct PropertyValueConvertibleTests {
    @Test func variablesEncodeLikeTheirWrappedValues() throws {
        let count = 3, price = 9.99, vip = true, item = "book", tags = ["a", "b"]
        let missing: Int? = nil, present: Int? = 7
        let when = Date(timeIntervalSince1970: 1_700_000_000)
        let small: Int32 = -5, big: Int64 = 1 << 40, ratio: Float = 0.5, part = "sub-string".prefix(3)
        let variables: [String: any PropertyValueConvertible] = [
            "count": count, "price": price, "vip": vip, "item": item, "tags": tags, "missing": missing,
            "present": present, "when": when, "small": small, "big": big, "ratio": ratio, "part": part,
            "literal": 1, "wrapped": PropertyValue.string("w"),
        ]
        let wrapped: [String: PropertyValue] = [
            "count": .int(3), "price": .double(9.99), "vip": .bool(true), "item": .string("book"), "tags": .strings(["a", "b"]),
            "missing": .null, "present": .int(7), "when": .date(when), "small": .int(-5), "big": .int(1 << 40),
            "ratio": .double(0.5), "part": .string("sub"), "literal": .int(1), "wrapped": .string("w"),
        ]
        #expect(variables.propertyValues == wrapped)
    }

    /// The overloads reach the tracker: an event with variables is recorded like the wrapped one;
    /// all-literal dictionaries still pick the `[String: PropertyValue]` overload.
    @Test func trackTakesVariables() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("beacon-vars-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let beacon = try Beacon(configuration: .testing(dir))
        let n = 42, label = "x"
        beacon.track("Vars", properties: ["n": n, "label": label, "lit": true])
        beacon.track("Vars", properties: ["n": .int(n), "label": .string(label), "lit": true])
        beacon.profileSet(["plan": label, "seats": n])
        try beacon.validate("Vars", properties: ["n": n])
        await beacon.trackWaitingForRoom("Vars", properties: ["n": n])
        let literal: [String: PropertyValue] = ["a": 1]
        beacon.track("Literal", properties: literal)
        try await offPool { try beacon.sync() }
        let records = try readEventsWhileOpen(beacon)
        let props = records.map { $0["properties"] as? [String: Any] ?? [:] }
        #expect(props.count == 5)
        #expect(props[0]["n"] as? Int == 42 && props[0]["label"] as? String == "x" && props[0]["lit"] as? Bool == true)
        #expect(props[0]["n"] as? Int == props[1]["n"] as? Int && props[0]["label"] as? String == props[1]["label"] as? String)
        #expect(props[2]["seats"] as? Int == 42)
        #expect(props[3]["n"] as? Int == 42)
        await beacon.close()
    }
}
