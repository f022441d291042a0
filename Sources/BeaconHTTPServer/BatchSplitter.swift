/// Splits an upload body back into its events without re-encoding them: a JSON array, an
/// envelope `{"sent_at":…,"batch":[…]}`, or NDJSON (one event per line).
public enum BatchSplitter {
    /// The events of `body`, each as the exact bytes that were sent; nil if the body is none of
    /// the three formats.
    public static func events(in body: [UInt8]) -> [[UInt8]]? {
        var i = 0
        skipSpace(body, &i)
        guard i < body.count else { return [] }
        if body[i] == UInt8(ascii: "[") {
            guard let (events, end) = splitArray(body, from: i) else { return nil }
            var j = end
            skipSpace(body, &j)
            return j == body.count ? events : splitLines(body)
        }
        if body[i] == UInt8(ascii: "{") {
            // An envelope if a top-level "batch" array exists and it is the whole body; else NDJSON.
            if let events = envelope(body, from: i) { return events }
            return splitLines(body)
        }
        return nil
    }

    static func skipSpace(_ b: [UInt8], _ i: inout Int) {
        while i < b.count, b[i] == 0x20 || b[i] == 0x0A || b[i] == 0x0D || b[i] == 0x09 { i += 1 }
    }

    /// The end (exclusive) of the JSON value starting at `i`, scanning strings and nesting only.
    static func valueEnd(_ b: [UInt8], from start: Int) -> Int? {
        var i = start
        var depth = 0
        var inString = false
        while i < b.count {
            let c = b[i]
            if inString {
                if c == 0x5C { i += 2; continue }
                if c == 0x22 { inString = false; if depth == 0 { return i + 1 } }
            } else {
                switch c {
                case 0x22: inString = true
                case UInt8(ascii: "{"), UInt8(ascii: "["): depth += 1
                case UInt8(ascii: "}"), UInt8(ascii: "]"):
                    depth -= 1
                    if depth == 0 { return i + 1 }
                    if depth < 0 { return i }
                case UInt8(ascii: ","), 0x20, 0x0A, 0x0D, 0x09:
                    if depth == 0 { return i }
                default: break
                }
            }
            i += 1
        }
        return depth == 0 && !inString ? i : nil
    }

    static func splitArray(_ b: [UInt8], from start: Int) -> ([[UInt8]], Int)? {
        var events: [[UInt8]] = []
        var i = start + 1
        skipSpace(b, &i)
        if i < b.count, b[i] == UInt8(ascii: "]") { return ([], i + 1) }
        while i < b.count {
            skipSpace(b, &i)
            guard let end = valueEnd(b, from: i), end > i else { return nil }
            events.append(Array(b[i..<end]))
            i = end
            skipSpace(b, &i)
            guard i < b.count else { return nil }
            if b[i] == UInt8(ascii: ",") { i += 1; continue }
            if b[i] == UInt8(ascii: "]") { return (events, i + 1) }
            return nil
        }
        return nil
    }

    static func envelope(_ b: [UInt8], from start: Int) -> [[UInt8]]? {
        var i = start + 1
        var result: [[UInt8]]?
        while i < b.count {
            skipSpace(b, &i)
            guard i < b.count, b[i] == 0x22, let keyEnd = valueEnd(b, from: i) else { return nil }
            let key = b[(i + 1)..<(keyEnd - 1)]
            i = keyEnd
            skipSpace(b, &i)
            guard i < b.count, b[i] == UInt8(ascii: ":") else { return nil }
            i += 1
            skipSpace(b, &i)
            if Array(key) == Array("batch".utf8), i < b.count, b[i] == UInt8(ascii: "[") {
                guard let (events, end) = splitArray(b, from: i) else { return nil }
                result = events
                i = end
            } else {
                guard let end = valueEnd(b, from: i) else { return nil }
                i = end
            }
            skipSpace(b, &i)
            guard i < b.count else { return nil }
            if b[i] == UInt8(ascii: ",") { i += 1; continue }
            if b[i] == UInt8(ascii: "}") {
                var j = i + 1
                skipSpace(b, &j)
                return j == b.count ? result : nil
            }
            return nil
        }
        return nil
    }

    static func splitLines(_ b: [UInt8]) -> [[UInt8]] {
        b.split(separator: 0x0A, omittingEmptySubsequences: true).map { line in
            var line = Array(line)
            if line.last == 0x0D { line.removeLast() }
            return line
        }.filter { !$0.isEmpty }
    }
}
