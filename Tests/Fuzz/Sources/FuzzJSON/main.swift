// JSONValidator (the `beacon append` line check, compiled in from Sources/BeaconCLI) against
// Foundation's JSONSerialization: both accept or both refuse every input, except where the
// validator's documented contract (RFC 8259, UTF-8 only, nesting up to 512) differs on purpose:
//
// - a `\u` escape of a lone surrogate (D800–DFFF): the grammar allows it and the validator only
//   checks four hex digits; Foundation refuses an unpaired one;
// - numbers that do not fit a Double (`1e400`): valid JSON grammar; Foundation refuses them;
// - another encoding: Foundation guesses UTF-16/32 from zero bytes and skips a UTF-8 BOM, the
//   validator reads UTF-8 only (a NUL or BOM is invalid there);
// - nesting beyond the limits (the validator's 512 levels, Foundation's own);
// - a trailing comma (`[1,]`, `{"a":1,}`): Foundation (swift-corelibs) accepts it, RFC 8259 does
//   not, and neither does the validator.
import FuzzSupport
import Foundation

FuzzMain.run { bytes in
    let failure = JSONValidator.validate(bytes)
    var foundationError: (any Error)?
    do {
        _ = try JSONSerialization.jsonObject(with: Data(bytes), options: [.fragmentsAllowed])
    } catch {
        foundationError = error
    }
    if let failure {
        // The offset is inside the input (or at its end), and the reason can be printed.
        promise(failure.offset >= 0 && failure.offset <= bytes.count, "failure offset \(failure.offset) outside 0...\(bytes.count)")
        _ = failure.description
    }
    switch (failure, foundationError) {
    case (nil, nil), (.some, .some):
        return
    case (.some(let failure), nil):
        // Foundation accepts what the validator refuses.
        if failure.kind == .tooDeep { return }
        if JSONValidator.validate(withoutTrailingCommas(bytes)) == nil { return }
        if bytes.starts(with: [0xEF, 0xBB, 0xBF]) || bytes.prefix(4).contains(0) || bytes.starts(with: [0xFE, 0xFF]) || bytes.starts(with: [0xFF, 0xFE]) { return }
        promise(false, "the validator refuses (\(failure)) what JSONSerialization accepts: \(Array(bytes.prefix(200)))")
    case (nil, .some(let error)):
        // The validator accepts what Foundation refuses.
        if depth(bytes) > 500 || hasSurrogateEscape(bytes) || hasHugeNumber(bytes) { return }
        promise(false, "the validator accepts what JSONSerialization refuses (\(error)): \(Array(bytes.prefix(200)))")
    }
}

/// Calls `body` with the index of every byte outside strings (quotes included), in order.
func outsideStrings(_ b: [UInt8], _ body: (Int) -> Void) {
    var inString = false, i = 0
    while i < b.count {
        if inString {
            if b[i] == 0x5C { i += 1 } else if b[i] == 0x22 { inString = false }
        } else {
            if b[i] == 0x22 { inString = true }
            body(i)
        }
        i += 1
    }
}

/// The deepest nesting of brackets outside strings.
func depth(_ b: [UInt8]) -> Int {
    var depth = 0, deepest = 0
    outsideStrings(b) { i in
        if b[i] == 0x5B || b[i] == 0x7B {
            depth += 1
            deepest = max(deepest, depth)
        } else if b[i] == 0x5D || b[i] == 0x7D {
            depth -= 1
        }
    }
    return deepest
}

/// Whether a `\uD800`–`\uDFFF` escape appears (paired or not).
func hasSurrogateEscape(_ b: [UInt8]) -> Bool {
    guard b.count >= 6 else { return false }
    for i in 0..<(b.count - 5) where b[i] == 0x5C && b[i + 1] == UInt8(ascii: "u") && (b[i + 2] | 0x20) == UInt8(ascii: "d") {
        let third = b[i + 3] | 0x20
        if (0x38...0x39).contains(third) || (UInt8(ascii: "a")...UInt8(ascii: "f")).contains(third) { return true }
    }
    return false
}

/// Whether a number with an exponent or more than 15 digits appears outside strings (it may not
/// fit a Double or an Int64, which Foundation refuses).
func hasHugeNumber(_ b: [UInt8]) -> Bool {
    var digits = 0, huge = false
    outsideStrings(b) { i in
        let c = b[i]
        if c >= 0x30 && c <= 0x39 {
            digits += 1
            if digits > 15 { huge = true }
        } else if c == UInt8(ascii: "e") || c == UInt8(ascii: "E") {
            huge = true
        } else if c != UInt8(ascii: ".") && c != UInt8(ascii: "-") {
            digits = 0
        }
    }
    return huge
}

/// `bytes` without the commas (outside strings) that only whitespace separates from a `]` or `}`.
func withoutTrailingCommas(_ b: [UInt8]) -> [UInt8] {
    var trailing: Set<Int> = []
    outsideStrings(b) { i in
        guard b[i] == UInt8(ascii: ",") else { return }
        var j = i + 1
        while j < b.count, [0x20, 0x0A, 0x0D, 0x09].contains(b[j]) { j += 1 }
        if j < b.count, b[j] == UInt8(ascii: "]") || b[j] == UInt8(ascii: "}") { trailing.insert(i) }
    }
    return b.indices.filter { !trailing.contains($0) }.map { b[$0] }
}
