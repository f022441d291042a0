import Foundation

/// The input rules of the tracker, written to run on bytes without allocating.
enum Validation {
    static let maxNameLength = 100
    static let maxStringBytes = 8 * 1024
    static let maxIdentityBytes = 255
    /// 0001-01-01 00:00:00.000 and 9999-12-31 23:59:59.999 UTC, in milliseconds since 1970.
    static let dateRange: ClosedRange<Int64> = -62_135_596_800_000 ... 253_402_300_799_999

    /// Names a caller may not use as an event name or a property key: the record's own fields and
    /// the names collectors of this record format (`distinct_id`, `$lib`, `profile_set`, …)
    /// reserve for their own columns.
    static let reservedNames: [String] = [
        "_track_id", "anonymous_id", "date", "datetime", "distinct_id", "event", "events", "first_id",
        "id", "login_id", "original_id", "properties", "second_id", "time", "type", "user_id", "users",
    ]
    /// Preset keys a caller or a super property may set, overriding Beacon's value.
    static let presetKeys: Set<String> = ["$lib", "$lib_version", "$os", "$os_version", "$model", "$app_version"]

    @inline(__always)
    static func isIdentifierByte(_ byte: UInt8) -> Bool {
        (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x30 && byte <= 0x39) || byte == 0x5F || byte == 0x24
    }

    /// The identifier rule, on UTF-8 bytes.
    static func isIdentifier(_ utf8: UnsafeBufferPointer<UInt8>) -> Bool {
        guard utf8.count >= 1, utf8.count <= maxNameLength else { return false }
        if utf8[0] >= 0x30 && utf8[0] <= 0x39 { return false }
        for byte in utf8 where !isIdentifierByte(byte) { return false }
        return true
    }

    /// Whether `utf8` is one of ``reservedNames``: a switch on length and first byte, then one
    /// comparison, so the common case costs no call. Kept in step with the list by a test.
    static func isReserved(_ utf8: UnsafeBufferPointer<UInt8>) -> Bool {
        guard let first = utf8.first else { return false }
        @inline(__always) func equals(_ name: StaticString) -> Bool {
            memcmp(utf8.baseAddress!, name.utf8Start, name.utf8CodeUnitCount) == 0
        }
        switch (utf8.count, first) {
        case (2, 0x69): return equals("id")
        case (4, 0x64): return equals("date")
        case (4, 0x74): return equals("time") || equals("type")
        case (5, 0x65): return equals("event")
        case (5, 0x75): return equals("users")
        case (6, 0x65): return equals("events")
        case (7, 0x75): return equals("user_id")
        case (8, 0x64): return equals("datetime")
        case (8, 0x66): return equals("first_id")
        case (8, 0x6C): return equals("login_id")
        case (9, 0x5F): return equals("_track_id")
        case (9, 0x73): return equals("second_id")
        case (10, 0x70): return equals("properties")
        case (11, 0x64): return equals("distinct_id")
        case (11, 0x6F): return equals("original_id")
        case (12, 0x61): return equals("anonymous_id")
        default: return false
        }
    }

    /// Checks an event name (or property key: `isKey`) given as UTF-8. Returns true when it starts
    /// with `$` (an allowed preset key).
    static func checkName(_ utf8: UnsafeBufferPointer<UInt8>, isKey: Bool, event: @autoclosure () -> String, key: @autoclosure () -> String?) throws -> Bool {
        guard isIdentifier(utf8) else {
            let name = String(decoding: utf8, as: UTF8.self)
            let what = isKey ? "property key" : "event name"
            let reason = utf8.isEmpty ? "is empty" : utf8.count > maxNameLength ? "is \(utf8.count) bytes long, more than \(maxNameLength)" : "may hold only ASCII letters, digits, _ and $, and may not start with a digit"
            throw BeaconValidationError(event: event(), key: key(), code: .identifier, message: "the \(what) \"\(name)\" \(reason); rename it")
        }
        if isReserved(utf8) {
            let name = String(decoding: utf8, as: UTF8.self)
            throw BeaconValidationError(event: event(), key: key(), code: .reservedName, message: "\"\(name)\" is a reserved name (one of \(reservedNames.joined(separator: ", "))); rename it")
        }
        if utf8[0] == 0x24 {
            let name = String(decoding: utf8, as: UTF8.self)
            if isKey && presetKeys.contains(name) { return true }
            throw BeaconValidationError(event: event(), key: key(), code: .reservedPrefix, message: "names starting with $ are reserved for Beacon's presets and events\(isKey ? " (a property may override only \(presetKeys.sorted().joined(separator: ", ")))" : ""); drop the $")
        }
        return false
    }

    static func checkName(_ name: String, isKey: Bool, event: @autoclosure () -> String, key: @autoclosure () -> String?) throws -> Bool {
        var name = name
        return try name.withUTF8 { try checkName($0, isKey: isKey, event: event(), key: key()) }
    }

    /// Checks one property value.
    static func checkValue(_ value: PropertyValue, event: @autoclosure () -> String, key: String) throws {
        switch value {
        case .string(let s):
            let count = s.utf8.count
            if count > maxStringBytes {
                throw BeaconValidationError(event: event(), key: key, code: .stringTooLong, message: "the string is \(count) bytes of UTF-8, more than \(maxStringBytes); shorten it")
            }
        case .double(let d):
            if !d.isFinite {
                throw BeaconValidationError(event: event(), key: key, code: .nonFiniteNumber, message: "the number is \(d), which JSON cannot carry; send a finite number or null")
            }
        case .date(let d):
            let ms = d.timeIntervalSince1970 * 1000
            if !(ms.isFinite && ms >= Double(dateRange.lowerBound) && ms <= Double(dateRange.upperBound)) {
                throw BeaconValidationError(event: event(), key: key, code: .dateOutOfRange, message: "the date \(d) is outside the years 1 to 9999")
            }
        case .strings(let array):
            for (index, s) in array.enumerated() where s.utf8.count > maxStringBytes {
                throw BeaconValidationError(event: event(), key: key, code: .stringTooLong, message: "element \(index) of the array is \(s.utf8.count) bytes of UTF-8, more than \(maxStringBytes); shorten it")
            }
        case .int, .bool, .null:
            break
        }
    }

    /// Checks a distinct id, anonymous id or login id.
    static func checkIdentity(_ id: String, what: String, event: @autoclosure () -> String) throws {
        let count = id.utf8.count
        if count == 0 || count > maxIdentityBytes {
            throw BeaconValidationError(event: event(), key: nil, code: .invalidIdentity, message: "the \(what) is \(count == 0 ? "empty" : "\(count) bytes long"); use 1 to \(maxIdentityBytes) bytes of UTF-8")
        }
    }
}
