/// A fast byte-level validator for one JSON text (RFC 8259), without building any value.
///
/// Checks the whole grammar: literals, numbers (no leading zeros, no `+`, digits after `.` and
/// `e`), strings (escapes, `\u` with four hex digits, no raw control characters, well-formed
/// UTF-8: no overlongs, no surrogates, nothing above U+10FFFF), objects and arrays, and that
/// nothing but whitespace follows the value. Nesting is limited to ``maxDepth`` levels so that
/// hostile input cannot exhaust the stack. Runs over ASCII string content eight bytes at a time.
///
/// ```swift
/// if let failure = JSONValidator.validate(bytes) { print("byte \(failure.offset): \(failure.reason)") }
/// ```
enum JSONValidator {
    /// The deepest nesting of arrays and objects accepted.
    static let maxDepth = 512

    /// Why a text is not valid JSON, and where.
    struct Failure: Error, Sendable, Equatable, CustomStringConvertible {
        /// The kind of mistake.
        enum Kind: Sendable, Equatable {
            case empty
            case expectedValue
            case invalidLiteral
            case invalidNumber
            case unterminatedString
            case controlCharacter
            case invalidEscape
            case invalidUTF8
            case expectedColon
            case expectedKey
            case expectedCommaOrObjectEnd
            case expectedCommaOrArrayEnd
            case trailingData
            case tooDeep
        }

        /// The kind of mistake.
        var kind: Kind
        /// The 0-based byte offset where the mistake was found.
        var offset: Int
        /// The byte found there, if any (nil at the end of the input).
        var byte: UInt8?

        /// The reason in words, with a 1-based column: "expected ':' after an object key at column 8 (found '1')".
        var description: String { describe(columnOffset: 0) }

        /// Like ``description``, with `columnOffset` added to the column (when the validated text
        /// started inside a longer line).
        func describe(columnOffset: Int) -> String {
            kind == .empty ? reason : "\(reason) at column \(columnOffset + offset + 1)\(found)"
        }

        /// The reason in words, without the position.
        var reason: String {
            switch kind {
            case .empty: "empty line, not a JSON value"
            case .expectedValue: byte == nil ? "the text ends where a value is expected" : "expected a JSON value"
            case .invalidLiteral: "invalid literal (expected true, false or null)"
            case .invalidNumber: "invalid number"
            case .unterminatedString: "unterminated string"
            case .controlCharacter: "raw control character in a string (escape it, e.g. \\t or \\u0001)"
            case .invalidEscape: "invalid escape in a string"
            case .invalidUTF8: "invalid UTF-8"
            case .expectedColon: "expected ':' after an object key"
            case .expectedKey: "expected a string key"
            case .expectedCommaOrObjectEnd: "expected ',' or '}' in an object"
            case .expectedCommaOrArrayEnd: "expected ',' or ']' in an array"
            case .trailingData: "more data after the JSON value"
            case .tooDeep: "nesting deeper than \(JSONValidator.maxDepth) levels"
            }
        }

        private var found: String {
            guard let byte else { return kind == .expectedValue || kind == .empty ? "" : " (at the end of the text)" }
            if byte >= 0x21 && byte < 0x7F { return " (found '\(Character(Unicode.Scalar(byte)))')" }
            let hex = String(byte, radix: 16, uppercase: true)
            return " (found byte 0x\(hex.count == 1 ? "0" : "")\(hex))"
        }
    }

    /// Validates `bytes` as one JSON text; nil when valid.
    static func validate(_ bytes: UnsafeBufferPointer<UInt8>) -> Failure? {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return Failure(kind: .empty, offset: 0, byte: nil) }
        var parser = Parser(p: base, n: bytes.count)
        parser.skipWhitespace()
        if parser.i == parser.n { return Failure(kind: .empty, offset: 0, byte: nil) }
        if let failure = parser.value(depth: 0) { return failure }
        parser.skipWhitespace()
        if parser.i != parser.n { return parser.fail(.trailingData) }
        return nil
    }

    /// Validates `bytes` as one JSON text; nil when valid.
    static func validate(_ bytes: [UInt8]) -> Failure? {
        bytes.withUnsafeBufferPointer { validate($0) }
    }

    struct Parser {
        let p: UnsafePointer<UInt8>
        let n: Int
        var i = 0

        init(p: UnsafePointer<UInt8>, n: Int) {
            self.p = p
            self.n = n
        }

        @inline(__always) func fail(_ kind: Failure.Kind) -> Failure {
            Failure(kind: kind, offset: i, byte: i < n ? p[i] : nil)
        }

        @inline(__always) mutating func skipWhitespace() {
            while i < n {
                let b = p[i]
                if b == 0x20 || b == 0x0A || b == 0x0D || b == 0x09 { i += 1 } else { return }
            }
        }

        mutating func value(depth: Int) -> Failure? {
            guard i < n else { return fail(.expectedValue) }
            switch p[i] {
            case UInt8(ascii: "\""): return string()
            case UInt8(ascii: "{"): return object(depth: depth + 1)
            case UInt8(ascii: "["): return array(depth: depth + 1)
            case UInt8(ascii: "t"): return literal(0x7472_7565, 4)  // "true"
            case UInt8(ascii: "f"): return literal5()
            case UInt8(ascii: "n"): return literal(0x6E75_6C6C, 4)  // "null"
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"): return number()
            default: return fail(.expectedValue)
            }
        }

        /// A four-letter literal, compared as one big-endian word.
        @inline(__always) mutating func literal(_ word: UInt32, _ length: Int) -> Failure? {
            guard n - i >= length else { return fail(.invalidLiteral) }
            let got = UInt32(p[i]) << 24 | UInt32(p[i + 1]) << 16 | UInt32(p[i + 2]) << 8 | UInt32(p[i + 3])
            guard got == word else { return fail(.invalidLiteral) }
            i += length
            return nil
        }

        /// "false".
        @inline(__always) mutating func literal5() -> Failure? {
            guard n - i >= 5, p[i + 1] == UInt8(ascii: "a"), p[i + 2] == UInt8(ascii: "l"),
                  p[i + 3] == UInt8(ascii: "s"), p[i + 4] == UInt8(ascii: "e") else { return fail(.invalidLiteral) }
            i += 5
            return nil
        }

        @inline(__always) func isDigit(_ k: Int) -> Bool {
            k < n && p[k] &- 0x30 < 10
        }

        mutating func number() -> Failure? {
            if p[i] == UInt8(ascii: "-") { i += 1 }
            guard i < n, isDigit(i) else { return fail(.invalidNumber) }
            if p[i] == UInt8(ascii: "0") {
                i += 1
                if isDigit(i) { return fail(.invalidNumber) }  // leading zero
            } else {
                while isDigit(i) { i += 1 }
            }
            if i < n && p[i] == UInt8(ascii: ".") {
                i += 1
                guard isDigit(i) else { return fail(.invalidNumber) }
                while isDigit(i) { i += 1 }
            }
            if i < n && (p[i] | 0x20) == UInt8(ascii: "e") {
                i += 1
                if i < n && (p[i] == UInt8(ascii: "+") || p[i] == UInt8(ascii: "-")) { i += 1 }
                guard isDigit(i) else { return fail(.invalidNumber) }
                while isDigit(i) { i += 1 }
            }
            return nil
        }

        /// A string starting at the opening quote.
        @inline(__always) mutating func string() -> Failure? {
            i += 1
            while true {
                // Eight plain ASCII bytes (no quote, backslash, control or non-ASCII) at a time (little-endian loads).
                while n - i >= 8 {
                    let x = UnsafeRawPointer(p + i).loadUnaligned(as: UInt64.self)
                    let high: UInt64 = 0x8080_8080_8080_8080
                    let ones: UInt64 = 0x0101_0101_0101_0101
                    let quote = x ^ 0x2222_2222_2222_2222
                    let backslash = x ^ 0x5C5C_5C5C_5C5C_5C5C
                    let special = (x | ((x &- ones &* 0x20) & ~x)
                        | ((quote &- ones) & ~quote)
                        | ((backslash &- ones) & ~backslash)) & high
                    if special != 0 {
                        // The lowest flagged byte is exact (borrows only run upwards): go straight to it.
                        i += special.trailingZeroBitCount >> 3
                        break
                    }
                    i += 8
                }
                guard i < n else { return fail(.unterminatedString) }
                let b = p[i]
                if b == UInt8(ascii: "\"") {
                    i += 1
                    return nil
                } else if b == UInt8(ascii: "\\") {
                    i += 1
                    guard i < n else { return fail(.unterminatedString) }
                    switch p[i] {
                    case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"), UInt8(ascii: "b"),
                         UInt8(ascii: "f"), UInt8(ascii: "n"), UInt8(ascii: "r"), UInt8(ascii: "t"):
                        i += 1
                    case UInt8(ascii: "u"):
                        i += 1
                        for _ in 0..<4 {
                            guard i < n, Self.isHex(p[i]) else { return fail(.invalidEscape) }
                            i += 1
                        }
                    default:
                        return fail(.invalidEscape)
                    }
                } else if b < 0x20 {
                    return fail(.controlCharacter)
                } else if b < 0x80 {
                    i += 1
                } else if let failure = utf8Sequence() {
                    return failure
                }
            }
        }

        @inline(__always) static func isHex(_ b: UInt8) -> Bool {
            (b &- 0x30) < 10 || ((b | 0x20) &- 0x61) < 6
        }

        /// One multi-byte UTF-8 sequence starting at `i` (Unicode 15, table 3-7).
        mutating func utf8Sequence() -> Failure? {
            let b0 = p[i]
            @inline(__always) func continuation(_ k: Int, _ low: UInt8 = 0x80, _ high: UInt8 = 0xBF) -> Bool {
                k < n && p[k] >= low && p[k] <= high
            }
            switch b0 {
            case 0xC2...0xDF:
                guard continuation(i + 1) else { return fail(.invalidUTF8) }
                i += 2
            case 0xE0...0xEF:
                let low: UInt8 = b0 == 0xE0 ? 0xA0 : 0x80
                let high: UInt8 = b0 == 0xED ? 0x9F : 0xBF
                guard continuation(i + 1, low, high), continuation(i + 2) else { return fail(.invalidUTF8) }
                i += 3
            case 0xF0...0xF4:
                let low: UInt8 = b0 == 0xF0 ? 0x90 : 0x80
                let high: UInt8 = b0 == 0xF4 ? 0x8F : 0xBF
                guard continuation(i + 1, low, high), continuation(i + 2), continuation(i + 3) else { return fail(.invalidUTF8) }
                i += 4
            default:
                return fail(.invalidUTF8)
            }
            return nil
        }

        mutating func object(depth: Int) -> Failure? {
            guard depth <= JSONValidator.maxDepth else { return fail(.tooDeep) }
            i += 1
            skipWhitespace()
            if i < n && p[i] == UInt8(ascii: "}") {
                i += 1
                return nil
            }
            while true {
                guard i < n, p[i] == UInt8(ascii: "\"") else { return fail(.expectedKey) }
                if let failure = string() { return failure }
                skipWhitespace()
                guard i < n, p[i] == UInt8(ascii: ":") else { return fail(.expectedColon) }
                i += 1
                skipWhitespace()
                if let failure = value(depth: depth) { return failure }
                skipWhitespace()
                guard i < n else { return fail(.expectedCommaOrObjectEnd) }
                if p[i] == UInt8(ascii: ",") {
                    i += 1
                    skipWhitespace()
                } else if p[i] == UInt8(ascii: "}") {
                    i += 1
                    return nil
                } else {
                    return fail(.expectedCommaOrObjectEnd)
                }
            }
        }

        mutating func array(depth: Int) -> Failure? {
            guard depth <= JSONValidator.maxDepth else { return fail(.tooDeep) }
            i += 1
            skipWhitespace()
            if i < n && p[i] == UInt8(ascii: "]") {
                i += 1
                return nil
            }
            while true {
                if let failure = value(depth: depth) { return failure }
                skipWhitespace()
                guard i < n else { return fail(.expectedCommaOrArrayEnd) }
                if p[i] == UInt8(ascii: ",") {
                    i += 1
                    skipWhitespace()
                } else if p[i] == UInt8(ascii: "]") {
                    i += 1
                    return nil
                } else {
                    return fail(.expectedCommaOrArrayEnd)
                }
            }
        }
    }
}
