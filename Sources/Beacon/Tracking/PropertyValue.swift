import Foundation

/// The value of one event or profile property.
///
/// Literal-friendly, so a property dictionary reads like JSON:
///
/// ```swift
/// beacon.track("Purchase", properties: ["price": 9.99, "item": "book", "vip": true, "tags": ["a", "b"]])
/// ```
///
/// Encoded as JSON: strings (escaped, at most 8 KiB of UTF-8), integers, finite doubles, booleans,
/// dates as `"yyyy-MM-dd HH:mm:ss.SSS"` in UTC, arrays of strings, and `null`.
public enum PropertyValue: Sendable, Hashable {
    /// A string of at most 8 KiB of UTF-8.
    case string(String)
    /// A 64-bit signed integer.
    case int(Int)
    /// A finite double; NaN and infinities are refused.
    case double(Double)
    /// A boolean.
    case bool(Bool)
    /// A point in time, encoded as `"yyyy-MM-dd HH:mm:ss.SSS"` in UTC (years 1 to 9999).
    case date(Date)
    /// An array of strings (each at most 8 KiB).
    case strings([String])
    /// JSON `null`.
    case null
}

extension PropertyValue: ExpressibleByStringLiteral {
    public init(stringLiteral value: String) { self = .string(value) }
}

extension PropertyValue: ExpressibleByIntegerLiteral {
    public init(integerLiteral value: Int) { self = .int(value) }
}

extension PropertyValue: ExpressibleByFloatLiteral {
    public init(floatLiteral value: Double) { self = .double(value) }
}

extension PropertyValue: ExpressibleByBooleanLiteral {
    public init(booleanLiteral value: Bool) { self = .bool(value) }
}

extension PropertyValue: ExpressibleByArrayLiteral {
    public init(arrayLiteral elements: String...) { self = .strings(elements) }
}

extension PropertyValue: ExpressibleByNilLiteral {
    public init(nilLiteral: ()) { self = .null }
}

extension PropertyValue: CustomStringConvertible {
    public var description: String {
        var bytes: [UInt8] = []
        JSONBytes.appendValue(self, to: &bytes)
        return String(decoding: bytes, as: UTF8.self)
    }
}

extension PropertyValue: ExpressibleByStringInterpolation {
    public init(stringInterpolation: DefaultStringInterpolation) { self = .string(String(stringInterpolation: stringInterpolation)) }
}
