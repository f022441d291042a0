import Foundation

/// Writes JSON straight into a byte buffer: no `JSONSerialization`, no `JSONEncoder`, no
/// intermediate `String`. Every string is escaped so that no raw control character (and so no
/// raw newline) can reach the log, which would break its one-record-per-line framing.
enum JSONBytes {
    static let hex: [UInt8] = Array("0123456789abcdef".utf8)

    /// Appends `"…"` with `"`, `\`, every control character below 0x20 and U+FEFF escaped.
    @inline(__always)
    static func appendString(_ string: String, to out: inout [UInt8]) {
        var string = string
        string.withUTF8 { appendString($0, to: &out) }
    }

    static func appendString(_ utf8: UnsafeBufferPointer<UInt8>, to out: inout [UInt8]) {
        out.append(0x22)
        var start = 0
        var index = 0
        let count = utf8.count
        while index < count {
            let byte = utf8[index]
            if byte < 0x20 || byte == 0x22 || byte == 0x5C {
                if index > start { out.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[start..<index])) }
                appendEscape(byte, to: &out)
                start = index + 1
            } else if byte == 0xEF, index + 2 < count, utf8[index + 1] == 0xBB, utf8[index + 2] == 0xBF {
                // U+FEFF (byte-order mark) is written as \ufeff: a parser that strips a leading BOM
                // from a string, as Foundation's JSONSerialization on Linux does, then keeps it.
                if index > start { out.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[start..<index])) }
                out.append(contentsOf: [0x5C, 0x75, 0x66, 0x65, 0x66, 0x66])
                index += 3
                start = index
                continue
            }
            index += 1
        }
        if count > start { out.append(contentsOf: UnsafeBufferPointer(rebasing: utf8[start..<count])) }
        out.append(0x22)
    }

    static func appendEscape(_ byte: UInt8, to out: inout [UInt8]) {
        out.append(0x5C)
        switch byte {
        case 0x22: out.append(0x22)
        case 0x5C: out.append(0x5C)
        case 0x0A: out.append(UInt8(ascii: "n"))
        case 0x0D: out.append(UInt8(ascii: "r"))
        case 0x09: out.append(UInt8(ascii: "t"))
        case 0x08: out.append(UInt8(ascii: "b"))
        case 0x0C: out.append(UInt8(ascii: "f"))
        default:
            out.append(UInt8(ascii: "u"))
            out.append(0x30)
            out.append(0x30)
            out.append(hex[Int(byte >> 4)])
            out.append(hex[Int(byte & 0xF)])
        }
    }

    /// Appends bytes that need no escaping (identifiers, already-encoded JSON).
    @inline(__always)
    static func appendRaw(_ string: String, to out: inout [UInt8]) {
        var string = string
        string.withUTF8 { out.append(contentsOf: $0) }
    }

    /// Appends `"key":` for a key already known to be an identifier (nothing to escape).
    @inline(__always)
    static func appendKey(_ key: UnsafeBufferPointer<UInt8>, to out: inout [UInt8]) {
        out.append(0x22)
        out.append(contentsOf: key)
        out.append(0x22)
        out.append(0x3A)
    }

    /// Appends a signed integer in decimal.
    static func appendInt(_ value: Int64, to out: inout [UInt8]) {
        if value < 0 { out.append(0x2D) }
        appendUInt(value.magnitude, to: &out)
    }

    /// Appends an unsigned integer in decimal.
    static func appendUInt(_ value: UInt64, to out: inout [UInt8]) {
        if value < 10 {
            out.append(0x30 + UInt8(value))
            return
        }
        withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 20) { digits in
            var v = value
            var i = 20
            while v > 0 {
                i -= 1
                digits[i] = 0x30 + UInt8(v % 10)
                v /= 10
            }
            out.append(contentsOf: UnsafeBufferPointer(rebasing: digits[i..<20]))
        }
    }

    /// Appends a finite double with Swift's shortest round-trip representation (`9.99`, `1e+20`,
    /// `5e-324`, `-0.0`), which is valid JSON. The caller makes sure the value is finite.
    static func appendDouble(_ value: Double, to out: inout [UInt8]) {
        if value == value.rounded(.towardZero), value.magnitude < 1e15 {
            // Integral values: "3.0" is what `description` gives; write it without the String.
            if value.sign == .minus { out.append(0x2D) }
            appendUInt(UInt64(value.magnitude), to: &out)
            out.append(0x2E)
            out.append(0x30)
            return
        }
        appendRaw(value.description, to: &out)
    }

    /// Appends a fixed-point decimal with three decimals from a count of thousandths
    /// (`$event_duration`: milliseconds with microsecond precision).
    static func appendThousandths(_ value: Int64, to out: inout [UInt8]) {
        if value < 0 { out.append(0x2D) }
        let magnitude = value.magnitude
        appendUInt(magnitude / 1000, to: &out)
        out.append(0x2E)
        let fraction = magnitude % 1000
        out.append(0x30 + UInt8(fraction / 100))
        out.append(0x30 + UInt8(fraction / 10 % 10))
        out.append(0x30 + UInt8(fraction % 10))
    }

    /// Appends `"yyyy-MM-dd HH:mm:ss.SSS"` in UTC for milliseconds since 1970, with the civil-from-days
    /// algorithm (no `DateFormatter`, no allocation). Years 1…9999.
    static func appendDate(millisecondsSince1970 ms: Int64, to out: inout [UInt8]) {
        var days = ms / 86_400_000
        var msOfDay = ms % 86_400_000
        if msOfDay < 0 { msOfDay += 86_400_000; days -= 1 }
        // Howard Hinnant's days_from_civil inverse.
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let doe = z - era * 146_097
        let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365
        var year = yoe + era * 400
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100)
        let mp = (5 * doy + 2) / 153
        let day = doy - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        if month <= 2 { year += 1 }
        out.append(0x22)
        appendDigits(year, 4, to: &out)
        out.append(0x2D)
        appendDigits(month, 2, to: &out)
        out.append(0x2D)
        appendDigits(day, 2, to: &out)
        out.append(0x20)
        appendDigits(msOfDay / 3_600_000, 2, to: &out)
        out.append(0x3A)
        appendDigits(msOfDay / 60_000 % 60, 2, to: &out)
        out.append(0x3A)
        appendDigits(msOfDay / 1000 % 60, 2, to: &out)
        out.append(0x2E)
        appendDigits(msOfDay % 1000, 3, to: &out)
        out.append(0x22)
    }

    @inline(__always)
    static func appendDigits(_ value: Int64, _ width: Int, to out: inout [UInt8]) {
        var divisor: Int64 = 1
        for _ in 1..<width { divisor *= 10 }
        var v = value
        while divisor > 0 {
            out.append(0x30 + UInt8(v / divisor % 10))
            v %= divisor
            divisor /= 10
        }
    }

    /// Milliseconds since 1970 of a date, rounded down.
    @inline(__always)
    static func milliseconds(_ date: Date) -> Int64 {
        Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
    }

    /// Appends one property value. Validation has made sure doubles are finite and dates in range.
    static func appendValue(_ value: PropertyValue, to out: inout [UInt8]) {
        switch value {
        case .string(let s): appendString(s, to: &out)
        case .int(let i): appendInt(Int64(i), to: &out)
        case .double(let d): appendDouble(d, to: &out)
        case .bool(let b): appendRaw(b ? "true" : "false", to: &out)
        case .date(let d): appendDate(millisecondsSince1970: milliseconds(d), to: &out)
        case .strings(let array):
            out.append(0x5B)
            for (index, s) in array.enumerated() {
                if index > 0 { out.append(0x2C) }
                appendString(s, to: &out)
            }
            out.append(0x5D)
        case .null: appendRaw("null", to: &out)
        }
    }
}
