import Foundation

/// The start of a collector's answer body, as text for reports: at most `limit` bytes, cut at a
/// character boundary, control characters (newlines included) shown as spaces, `…` when cut.
enum AnswerExcerpt {
    /// The limit for `rejected.jsonl`.
    static let rejectedLimit = 1024
    /// The limit for diagnostics and errors.
    static let messageLimit = 512

    static func text(_ body: [UInt8], limit: Int) -> String {
        var end = min(body.count, limit)
        // Do not cut a UTF-8 sequence: back up over continuation bytes to a lead byte.
        if end < body.count {
            while end > 0 && body[end] & 0xC0 == 0x80 { end -= 1 }
        }
        var text = String(decoding: body[..<end], as: UTF8.self)
        text = String(text.unicodeScalars.map { $0.value < 0x20 || $0.value == 0x7F ? " " : Character($0) })
        text = text.trimmingCharacters(in: .whitespaces)
        return end < body.count ? text + "…" : text
    }
}
