import Foundation

/// The value of one event or profile property.
///
/// Literal-friendly, so a property dictionary reads like JSON:
///
/// ```swift
/// beacon.track("Purchase", properties: ["price": 9.99, "item": "book", "vip": true, "tags": ["a", "b"]])
/// ```
///
/// Variables of the usual types go in as they are (see ``PropertyValueConvertible``):
///
/// ```swift
/// let count = cart.count, total = cart.total
/// beacon.track("Checkout", properties: ["count": count, "total": total, "currency": "EUR"])
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

/// A type whose values can be event properties without wrapping: `["count": n]` for an `Int` `n`,
/// where ``PropertyValue``'s literals only cover literals.
///
/// A dictionary with any variable in it is a `[String: any PropertyValueConvertible]` and goes
/// through the overloads of `track` that take one, which convert it to ``PropertyValue``s once;
/// an all-literal dictionary is built as `[String: PropertyValue]` directly, as before, at no cost.
/// `nil` is not a literal of this protocol: in a dictionary with variables, write `PropertyValue.null`
/// or pass an `Optional` variable (nil becomes `null`).
public protocol PropertyValueConvertible: Sendable {
    /// The property value this value is sent as.
    var propertyValue: PropertyValue { get }
}

extension PropertyValue: PropertyValueConvertible {
    public var propertyValue: PropertyValue { self }
}

extension String: PropertyValueConvertible {
    public var propertyValue: PropertyValue { .string(self) }
}

extension Substring: PropertyValueConvertible {
    public var propertyValue: PropertyValue { .string(String(self)) }
}

extension Int: PropertyValueConvertible {
    public var propertyValue: PropertyValue { .int(self) }
}

extension Int64: PropertyValueConvertible {
    public var propertyValue: PropertyValue { .int(Int(self)) }
}

extension Int32: PropertyValueConvertible {
    public var propertyValue: PropertyValue { .int(Int(self)) }
}

extension UInt32: PropertyValueConvertible {
    public var propertyValue: PropertyValue { .int(Int(self)) }
}

extension Double: PropertyValueConvertible {
    public var propertyValue: PropertyValue { .double(self) }
}

extension Float: PropertyValueConvertible {
    public var propertyValue: PropertyValue { .double(Double(self)) }
}

extension Bool: PropertyValueConvertible {
    public var propertyValue: PropertyValue { .bool(self) }
}

extension Date: PropertyValueConvertible {
    public var propertyValue: PropertyValue { .date(self) }
}

extension Array: PropertyValueConvertible where Element == String {
    public var propertyValue: PropertyValue { .strings(self) }
}

extension Optional: PropertyValueConvertible where Wrapped: PropertyValueConvertible {
    /// The wrapped value's, or `null`.
    public var propertyValue: PropertyValue { self?.propertyValue ?? .null }
}

extension Dictionary where Key == String, Value == any PropertyValueConvertible {
    /// The same properties as ``PropertyValue``s.
    var propertyValues: [String: PropertyValue] { mapValues { $0.propertyValue } }
}

extension Beacon {
    /// ``track(_:properties:distinctId:)`` for a dictionary with variables in it:
    /// `["count": count, "item": "book"]` where `count` is an `Int`.
    public func track(_ event: String, properties: [String: any PropertyValueConvertible], distinctId: String? = nil) {
        track(event, properties: properties.propertyValues, distinctId: distinctId)
    }

    /// ``trackWaitingForRoom(_:properties:distinctId:)`` for a dictionary with variables in it.
    public func trackWaitingForRoom(_ event: String, properties: [String: any PropertyValueConvertible], distinctId: String? = nil) async {
        await trackWaitingForRoom(event, properties: properties.propertyValues, distinctId: distinctId)
    }

    /// ``validate(_:properties:distinctId:)`` for a dictionary with variables in it.
    public func validate(_ event: String, properties: [String: any PropertyValueConvertible], distinctId: String? = nil) throws {
        try validate(event, properties: properties.propertyValues, distinctId: distinctId)
    }

    /// ``profileSet(_:distinctId:)`` for a dictionary with variables in it.
    public func profileSet(_ properties: [String: any PropertyValueConvertible], distinctId: String? = nil) {
        profileSet(properties.propertyValues, distinctId: distinctId)
    }

    /// ``profileSetOnce(_:distinctId:)`` for a dictionary with variables in it.
    public func profileSetOnce(_ properties: [String: any PropertyValueConvertible], distinctId: String? = nil) {
        profileSetOnce(properties.propertyValues, distinctId: distinctId)
    }

    /// ``profileIncrement(_:distinctId:)`` for a dictionary with variables in it.
    public func profileIncrement(_ properties: [String: any PropertyValueConvertible], distinctId: String? = nil) {
        profileIncrement(properties.propertyValues, distinctId: distinctId)
    }
}
