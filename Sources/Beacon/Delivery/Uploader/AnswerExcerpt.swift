import Foundation

/// The start of a collector's answer body, as text for reports: at most `limit` bytes (the `…`
/// that marks a cut included), cut at a character boundary, control characters (newlines
/// included) shown as spaces.
enum AnswerExcerpt {
    /// The limit for `rejected.jsonl`.
    static let rejectedLimit = 1024
    /// The limit for diagnostics and errors (``DeliveryError/answer``).
    static let messageLimit = 512

    static let ellipsis = "…"

    /// `limit` is at least the ellipsis's 3 bytes.
    static func text(_ body: [UInt8], limit: Int) -> String {
        guard body.count > limit else { return clean(body[...]) }
        // Room for the ellipsis; do not cut a UTF-8 sequence: back up over continuation bytes.
        var end = max(0, limit - ellipsis.utf8.count)
        while end > 0 && body[end] & 0xC0 == 0x80 { end -= 1 }
        return clean(body[..<end]) + ellipsis
    }

    /// `detail` (an excerpt, or a transport's message) cut to ``messageLimit`` for an error.
    static func forMessage(_ detail: String) -> String {
        detail.utf8.count > messageLimit ? text(Array(detail.utf8), limit: messageLimit) : detail
    }

    private static func clean(_ bytes: ArraySlice<UInt8>) -> String {
        let text = String(decoding: bytes, as: UTF8.self)
        return String(text.unicodeScalars.map { $0.value < 0x20 || $0.value == 0x7F ? " " : Character($0) })
            .trimmingCharacters(in: .whitespaces)
    }
}
