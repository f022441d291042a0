import BeaconLog
import Foundation

/// Writes JSON straight into bytes: no `JSONSerialization`, no `JSONEncoder`, no intermediate
/// `String`. Every string is escaped so that no raw control character (and so no raw newline)
/// can reach the log, which would break its one-record-per-line framing.
package enum JSONBytes {
    static let hex: StaticString = "0123456789abcdef"

    // MARK: Strings

    /// `string` as a JSON string literal, quotes included, escaped as ``appendString(_:to:)``
    /// escapes it: for JSON written outside the encoder (the tool, the delivery files).
    package static func quoted(_ string: String) -> String {
        ByteWriter.withWriter { out in
            appendString(string, to: &out)
            return String(decoding: UnsafeBufferPointer(start: out.base, count: out.count), as: UTF8.self)
        }
    }

    /// Appends `"…"` with `"`, `\`, every control character below 0x20 and U+FEFF escaped.
    @inline(__always)
    static func appendString(_ string: String, to out: inout ByteWriter) {
        var string = string
        string.withUTF8 { appendString($0, to: &out) }
    }

    static func appendString(_ utf8: UnsafeBufferPointer<UInt8>, to out: inout ByteWriter) {
        out.reserve(utf8.count + 2)
        out.appendReserved(0x22)
        var start = 0
        var index = 0
        let count = utf8.count
        while index < count {
            let byte = utf8[index]
            if byte < 0x20 || byte == 0x22 || byte == 0x5C {
                if index > start { out.append(UnsafeBufferPointer(rebasing: utf8[start..<index])) }
                appendEscape(byte, to: &out)
                start = index + 1
            } else if byte == 0xEF, index + 2 < count, utf8[index + 1] == 0xBB, utf8[index + 2] == 0xBF {
                // U+FEFF (byte-order mark) is written as \ufeff: a parser that strips a leading BOM
                // from a string, as Foundation's JSONSerialization on Linux does, then keeps it.
                if index > start { out.append(UnsafeBufferPointer(rebasing: utf8[start..<index])) }
                out.append("\\ufeff")
                index += 3
                start = index
                continue
            }
            index += 1
        }
        if count > start { out.append(UnsafeBufferPointer(rebasing: utf8[start..<count])) }
        out.append(0x22)
    }

    static func appendEscape(_ byte: UInt8, to out: inout ByteWriter) {
        out.reserve(6)
        out.appendReserved(0x5C)
        switch byte {
        case 0x22: out.appendReserved(0x22)
        case 0x5C: out.appendReserved(0x5C)
        case 0x0A: out.appendReserved(UInt8(ascii: "n"))
        case 0x0D: out.appendReserved(UInt8(ascii: "r"))
        case 0x09: out.appendReserved(UInt8(ascii: "t"))
        case 0x08: out.appendReserved(UInt8(ascii: "b"))
        case 0x0C: out.appendReserved(UInt8(ascii: "f"))
        default:
            out.appendReserved(UInt8(ascii: "u"))
            out.appendReserved(0x30)
            out.appendReserved(0x30)
            out.appendReserved(hex.utf8Start[Int(byte >> 4)])
            out.appendReserved(hex.utf8Start[Int(byte & 0xF)])
        }
    }

    /// Appends bytes that need no escaping (identifiers, already-encoded JSON).
    @inline(__always)
    static func appendRaw(_ string: String, to out: inout ByteWriter) {
        var string = string
        string.withUTF8 { out.append($0) }
    }

    /// Appends `"key":` for a key already known to be an identifier (nothing to escape).
    @inline(__always)
    static func appendKey(_ key: UnsafeBufferPointer<UInt8>, to out: inout ByteWriter) {
        out.reserve(key.count + 3)
        out.appendReserved(0x22)
        out.append(key)
        out.appendReserved(0x22)
        out.appendReserved(0x3A)
    }

    // MARK: Numbers

    /// Appends a signed integer in decimal.
    @inline(__always)
    static func appendInt(_ value: Int64, to out: inout ByteWriter) {
        if value < 0 { out.append(0x2D) }
        appendUInt(value.magnitude, to: &out)
    }

    /// Appends an unsigned integer in decimal, writing the digits in place, two at a time.
    static func appendUInt(_ value: UInt64, to out: inout ByteWriter) {
        let digits = DecimalDigits.count(value)
        out.reserve(digits)
        DecimalDigits.write(value, digits: digits, to: out.end)
        out.advance(by: digits)
    }

    /// Appends a finite double with Swift's shortest round-trip representation (`9.99`, `1e+20`,
    /// `5e-324`, `-0.0`), which is valid JSON. The caller makes sure the value is finite.
    static func appendDouble(_ value: Double, to out: inout ByteWriter) {
        if value == value.rounded(.towardZero), value.magnitude < 1e15 {
            // Integral values: "3.0", as `description` gives, without making the String.
            if value.sign == .minus { out.append(0x2D) }
            appendUInt(UInt64(value.magnitude), to: &out)
            out.append(".0")
            return
        }
        // Up to three decimals (prices, rates): s / 10^k is correctly rounded, so when it equals the
        // value, the decimal text "s with k decimals" parses back to exactly this double.
        let magnitude = value.magnitude
        if magnitude < 1e12 && magnitude >= 1e-3 {
            var scale = 10.0
            for decimals in 1...3 {
                let scaled = (magnitude * scale).rounded()
                if scaled / scale == magnitude {
                    let integer = UInt64(scaled)
                    let divisor = UInt64(scale)
                    if value.sign == .minus { out.append(0x2D) }
                    appendUInt(integer / divisor, to: &out)
                    out.reserve(4)
                    out.appendReserved(0x2E)
                    var fraction = integer % divisor
                    var digitScale = divisor / 10
                    for _ in 0..<decimals {
                        out.appendReserved(0x30 + UInt8(truncatingIfNeeded: fraction / digitScale))
                        fraction %= digitScale
                        digitScale /= 10
                    }
                    return
                }
                scale *= 10
            }
        }
        appendRaw(value.description, to: &out)
    }

    /// Appends a fixed-point decimal with three decimals from a count of thousandths
    /// (`$event_duration`: milliseconds with microsecond precision).
    static func appendThousandths(_ value: Int64, to out: inout ByteWriter) {
        if value < 0 { out.append(0x2D) }
        let magnitude = value.magnitude
        appendUInt(magnitude / 1000, to: &out)
        let fraction = magnitude % 1000
        out.reserve(4)
        out.appendReserved(0x2E)
        out.appendReserved(0x30 + UInt8(fraction / 100))
        out.appendReserved(0x30 + UInt8(fraction / 10 % 10))
        out.appendReserved(0x30 + UInt8(fraction % 10))
    }

    // MARK: Dates

    /// Appends `"yyyy-MM-dd HH:mm:ss.SSS"` in UTC (proleptic Gregorian calendar, as ISO 8601) for
    /// milliseconds since 1970, with the civil-from-days algorithm: no `DateFormatter`, no
    /// allocation. Years 1…9999.
    static func appendDate(millisecondsSince1970 ms: Int64, to out: inout ByteWriter) {
        var days = ms / 86_400_000
        var msOfDay = ms % 86_400_000
        if msOfDay < 0 { msOfDay += 86_400_000; days -= 1 }
        // Howard Hinnant's civil_from_days.
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
        out.reserve(25)
        out.appendReserved(0x22)
        appendDigits(year, 4, to: &out)
        out.appendReserved(0x2D)
        appendDigits(month, 2, to: &out)
        out.appendReserved(0x2D)
        appendDigits(day, 2, to: &out)
        out.appendReserved(0x20)
        appendDigits(msOfDay / 3_600_000, 2, to: &out)
        out.appendReserved(0x3A)
        appendDigits(msOfDay / 60_000 % 60, 2, to: &out)
        out.appendReserved(0x3A)
        appendDigits(msOfDay / 1000 % 60, 2, to: &out)
        out.appendReserved(0x2E)
        appendDigits(msOfDay % 1000, 3, to: &out)
        out.appendReserved(0x22)
    }

    /// `width` digits of `value` (0 ≤ value < 10^width), room already reserved.
    @inline(__always)
    static func appendDigits(_ value: Int64, _ width: Int, to out: inout ByteWriter) {
        var divisor: Int64 = 1
        for _ in 1..<width { divisor *= 10 }
        var v = value
        while divisor > 0 {
            out.appendReserved(0x30 + UInt8(truncatingIfNeeded: v / divisor % 10))
            v %= divisor
            divisor /= 10
        }
    }

    /// Milliseconds since 1970 of a date, rounded down.
    @inline(__always)
    static func milliseconds(_ date: Date) -> Int64 {
        Int64((date.timeIntervalSince1970 * 1000).rounded(.down))
    }

    // MARK: Values

    /// Appends one property value. Validation has made sure doubles are finite and dates in range.
    static func appendValue(_ value: PropertyValue, to out: inout ByteWriter) {
        switch value {
        case .string(let s): appendString(s, to: &out)
        case .int(let i): appendInt(Int64(i), to: &out)
        case .double(let d): appendDouble(d, to: &out)
        case .bool(let b): out.append(b ? "true" : "false")
        case .date(let d): appendDate(millisecondsSince1970: milliseconds(d), to: &out)
        case .strings(let array):
            out.append(0x5B)
            for (index, s) in array.enumerated() {
                if index > 0 { out.append(0x2C) }
                appendString(s, to: &out)
            }
            out.append(0x5D)
        case .null: out.append("null")
        }
    }
}

// MARK: - [UInt8] conveniences (off the hot path: snapshots, the identity file, tests)

extension JSONBytes {
    /// Runs `body` with a fresh writer and appends what it wrote to `out`.
    static func appending(to out: inout [UInt8], _ body: (inout ByteWriter) -> Void) {
        ByteWriter.withWriter { writer in
            body(&writer)
            out.append(contentsOf: writer.bytes)
        }
    }

    static func appendString(_ string: String, to out: inout [UInt8]) { appending(to: &out) { appendString(string, to: &$0) } }
    static func appendValue(_ value: PropertyValue, to out: inout [UInt8]) { appending(to: &out) { appendValue(value, to: &$0) } }
    static func appendInt(_ value: Int64, to out: inout [UInt8]) { appending(to: &out) { appendInt(value, to: &$0) } }
    static func appendUInt(_ value: UInt64, to out: inout [UInt8]) { appending(to: &out) { appendUInt(value, to: &$0) } }
    static func appendDouble(_ value: Double, to out: inout [UInt8]) { appending(to: &out) { appendDouble(value, to: &$0) } }
    static func appendThousandths(_ value: Int64, to out: inout [UInt8]) { appending(to: &out) { appendThousandths(value, to: &$0) } }
    static func appendDate(millisecondsSince1970 ms: Int64, to out: inout [UInt8]) { appending(to: &out) { appendDate(millisecondsSince1970: ms, to: &$0) } }
}
