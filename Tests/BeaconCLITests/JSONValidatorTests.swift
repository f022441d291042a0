import Foundation
import Testing
@testable import BeaconCLI

@Suite struct JSONValidatorTests {
    static let valid = [
        "0", "-0", "1", "-1", "12.5e+3", "1E-2", "0.0", "123456789012345678901234567890", "true", "false", "null",
        #""""#, #""a\"b\\c\/d\b\f\n\r\t""#, #""\u00e9\uD83D\uDE00""#, "\"é ☃ 😀\"",
        "[]", "{}", " [ 1 , 2 ] ", #"{"a":{"b":[{"c":null}]},"d":-1.5e10}"#, "\t{\"k\" : \"v\"}\r",
        #"{"distinct_id":"user-0","event":"Purchase","time":1700000000000,"_track_id":0,"properties":{"$lib":"Swift","$lib_version":"1.0.0","$os":"Linux","price":9.99,"item":"book","count":3,"vip":true}}"#,
    ]

    static let invalid: [(String, JSONValidator.Failure.Kind)] = [
        ("", .empty), ("   ", .empty), ("01", .invalidNumber), ("-", .invalidNumber), ("+1", .expectedValue), ("1.", .invalidNumber),
        (".5", .expectedValue), ("1e", .invalidNumber), ("1e+", .invalidNumber), ("-a", .invalidNumber), ("tru", .invalidLiteral),
        ("nul", .invalidLiteral), ("True", .expectedValue), ("falsy", .invalidLiteral), ("\"abc", .unterminatedString),
        ("\"a\\x\"", .invalidEscape), ("\"\\u12G4\"", .invalidEscape), ("\"\\u12\"", .invalidEscape), ("\"a\u{01}b\"", .controlCharacter),
        ("\"tab\there\"", .controlCharacter), ("{", .expectedKey), ("{\"a\"}", .expectedColon), ("{\"a\":}", .expectedValue),
        ("{\"a\":1,}", .expectedKey), ("{a:1}", .expectedKey), ("{\"a\":1 \"b\":2}", .expectedCommaOrObjectEnd), ("[1,]", .expectedValue),
        ("[1 2]", .expectedCommaOrArrayEnd), ("[", .expectedValue), ("]", .expectedValue), ("{} {}", .trailingData), ("1 2", .trailingData),
        ("'a'", .expectedValue), ("NaN", .expectedValue), ("[1,2", .expectedCommaOrArrayEnd),
    ]

    @Test(arguments: valid)
    func acceptsValidJSON(_ text: String) {
        #expect(JSONValidator.validate(Array(text.utf8)) == nil)
        // Foundation agrees (a cross-check of the table itself).
        #expect((try? JSONSerialization.jsonObject(with: Data(text.utf8), options: .fragmentsAllowed)) != nil)
    }

    @Test(arguments: invalid)
    func refusesInvalidJSONWithTheReason(_ text: String, _ kind: JSONValidator.Failure.Kind) {
        let failure = JSONValidator.validate(Array(text.utf8))
        #expect(failure?.kind == kind, "\(text): \(String(describing: failure))")
    }

    @Test func failureNamesColumnAndByte() throws {
        let failure = try #require(JSONValidator.validate(Array(#"{"a" 1}"#.utf8)))
        #expect(failure.offset == 5)
        #expect(failure.description == "expected ':' after an object key at column 6 (found '1')")
    }

    /// Every proper prefix of an object or array is incomplete, so invalid.
    @Test func everyTruncationOfAContainerIsInvalid() {
        for document in Self.valid where document.hasPrefix("[") || document.hasPrefix("{") || document.hasPrefix(" [") {
            let bytes = Array(document.utf8)
            let end = bytes.lastIndex { $0 == UInt8(ascii: "]") || $0 == UInt8(ascii: "}") }!
            for cut in 0..<end {
                #expect(JSONValidator.validate(Array(bytes[..<cut])) != nil, "prefix \(cut) of \(document)")
            }
        }
    }

    /// Quote, backslash, control and non-ASCII bytes are found at every position of the
    /// eight-bytes-at-a-time scan, not only where it falls back to bytes.
    @Test(arguments: 0..<24)
    func specialBytesAreFoundAtEveryPosition(_ position: Int) {
        func string(_ insert: [UInt8]) -> [UInt8] {
            var content = [UInt8](repeating: UInt8(ascii: "x"), count: 24)
            content.replaceSubrange(position..<position + 1, with: insert)
            return [UInt8(ascii: "\"")] + content + [UInt8(ascii: "\"")]
        }
        #expect(JSONValidator.validate(string([0x01]))?.kind == .controlCharacter)
        #expect(JSONValidator.validate(string([0x1F]))?.kind == .controlCharacter)
        #expect(JSONValidator.validate(string([0x20])) == nil)
        #expect(JSONValidator.validate(string([0x7F])) == nil)
        #expect(JSONValidator.validate(string([UInt8(ascii: "\"")]))?.kind == .trailingData)
        #expect(JSONValidator.validate(string(Array("\\n".utf8))) == nil)
        #expect(JSONValidator.validate(string(Array("\\q".utf8)))?.kind == .invalidEscape)
        #expect(JSONValidator.validate(string(Array("é".utf8))) == nil)
        #expect(JSONValidator.validate(string(Array("😀".utf8))) == nil)
        #expect(JSONValidator.validate(string([0xC3]))?.kind == .invalidUTF8)
        #expect(JSONValidator.validate(string([0xFF]))?.kind == .invalidUTF8)
    }

    /// Well-formed UTF-8 by Unicode table 3-7: boundaries of every lead byte range.
    @Test(arguments: [
        ([0xC2, 0x80], true), ([0xC1, 0xBF], false), ([0xDF, 0xBF], true), ([0xE0, 0xA0, 0x80], true), ([0xE0, 0x9F, 0xBF], false),
        ([0xED, 0x9F, 0xBF], true), ([0xED, 0xA0, 0x80], false), ([0xEF, 0xBF, 0xBF], true), ([0xF0, 0x90, 0x80, 0x80], true),
        ([0xF0, 0x8F, 0xBF, 0xBF], false), ([0xF4, 0x8F, 0xBF, 0xBF], true), ([0xF4, 0x90, 0x80, 0x80], false), ([0xF5, 0x80, 0x80, 0x80], false),
        ([0x80], false), ([0xE2, 0x98], false), ([0xC3, 0x41], false),
    ] as [([UInt8], Bool)])
    func utf8Boundaries(_ sequence: [UInt8], _ valid: Bool) {
        let text = [UInt8(ascii: "\"")] + sequence + [UInt8(ascii: "\"")]
        #expect((JSONValidator.validate(text) == nil) == valid)
        #expect((String(validating: sequence, as: UTF8.self) != nil) == valid)
    }

    @Test func nestingIsLimited() {
        let ok = String(repeating: "[", count: JSONValidator.maxDepth) + String(repeating: "]", count: JSONValidator.maxDepth)
        #expect(JSONValidator.validate(Array(ok.utf8)) == nil)
        let deep = String(repeating: "[", count: 100_000)
        #expect(JSONValidator.validate(Array(deep.utf8))?.kind == .tooDeep)
    }

    /// Random mutations of a valid document, checked against Foundation's parser: whatever we
    /// accept, it parses; whatever it parses, we accept, except its known leniency (a trailing
    /// comma before `}` or `]`). No `e` in the alphabet: Foundation refuses exponents beyond
    /// Double's range, which RFC 8259 allows.
    @Test func agreesWithFoundationOnMutations() throws {
        var generator = SystemRandomNumberGenerator()
        let base = Array(Self.valid.last!.utf8)
        let alphabet = Array(#"{}[]",:0123456789-+. \truflsn"#.utf8)
        let trailingComma = try Regex(#",\s*[}\]]"#)
        var accepted = 0
        for _ in 0..<3000 {
            var bytes = base
            for _ in 0..<Int.random(in: 1...3, using: &generator) {
                let at = Int.random(in: 0..<bytes.count, using: &generator)
                switch Int.random(in: 0..<3, using: &generator) {
                case 0: bytes[at] = alphabet.randomElement(using: &generator)!
                case 1: bytes.remove(at: at)
                default: bytes.insert(alphabet.randomElement(using: &generator)!, at: at)
                }
            }
            let text = String(decoding: bytes, as: UTF8.self)
            let ours = JSONValidator.validate(bytes) == nil
            let foundation = (try? JSONSerialization.jsonObject(with: Data(bytes), options: .fragmentsAllowed)) != nil
            if ours { accepted += 1 }
            if ours { #expect(foundation, "we accept what Foundation refuses: \(text)") }
            if foundation && !ours { #expect(text.contains(trailingComma), "we refuse what Foundation parses: \(text)") }
        }
        #expect(accepted > 100, "the mutations also produce valid documents")
    }
}
