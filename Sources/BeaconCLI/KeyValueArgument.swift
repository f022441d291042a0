import Beacon

/// A `key=value` command-line argument, such as `price=9.99` or `item=book`.
///
/// The key is everything before the first `=` and must not be empty; the value is the rest and
/// may be empty. ``value`` types it the way a shell user means it: `true`/`false`, `null`,
/// integers and decimals become JSON literals, everything else a string. Prefix the value with
/// `:` for a string that looks like one of those (`zip=:01234` is the string `"01234"`).
///
/// ```swift
/// let property = try KeyValueArgument("price=9.99")   // key "price", value .number("9.99")
/// ```
struct KeyValueArgument: Sendable, Equatable {
    /// A typed value.
    enum Value: Sendable, Equatable {
        case string(String)
        /// A JSON number, as its decimal text (validated by the RFC 8259 grammar).
        case number(String)
        case bool(Bool)
        case null

        /// The value as JSON text: strings quoted and escaped.
        var json: String {
            switch self {
            case .string(let text): JSONBytes.quoted(text)
            case .number(let text): text
            case .bool(let flag): flag ? "true" : "false"
            case .null: "null"
            }
        }
    }

    /// The part before the first `=`.
    var key: String
    /// The part after the first `=`, typed.
    var value: Value
    /// The part after the first `=`, as given.
    var rawValue: String

    /// Parses `text`; throws a usage error if it has no `=` or an empty key.
    init(_ text: String) throws {
        guard let equals = text.firstIndex(of: "=") else {
            throw CLIError(.usage, "'\(text)' is not key=value")
        }
        key = String(text[..<equals])
        rawValue = String(text[text.index(after: equals)...])
        guard !key.isEmpty else { throw CLIError(.usage, "'\(text)' has an empty key; write key=value") }
        value = Self.type(rawValue)
    }

    /// Parses every argument as `key=value`.
    static func parseAll(_ texts: [String]) throws -> [KeyValueArgument] {
        try texts.map { try KeyValueArgument($0) }
    }

    static func type(_ text: String) -> Value {
        switch text {
        case "true": return .bool(true)
        case "false": return .bool(false)
        case "null": return .null
        default: break
        }
        if text.hasPrefix(":") { return .string(String(text.dropFirst())) }
        let utf8 = Array(text.utf8)
        if let first = utf8.first, first == UInt8(ascii: "-") || (first >= 0x30 && first <= 0x39),
           utf8.withUnsafeBufferPointer({ JSONValidator.validate($0) == nil }) {
            return .number(text)
        }
        return .string(text)
    }
}
