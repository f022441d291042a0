import Foundation

/// What the uploader does with a collector's answer. ``AnswerAction/init(status:)`` is the
/// default table; ``DeliveryConfiguration/classifyAnswer`` lets a collector with its own
/// conventions override it.
public enum AnswerAction: Equatable, Sendable, CaseIterable {
    /// The events arrived (2xx): acknowledge them, the checkpoint advances durably.
    case acknowledge
    /// A transient failure (network error, timeout, 408, 429, 5xx except 501/505): keep the events,
    /// back off, honour `Retry-After`. A batch that keeps failing while other requests succeed is
    /// isolated by bisection, and the one event that keeps failing is set aside.
    case retry
    /// Too large (413): split the batch in halves; a single event still too large is set aside.
    case split
    /// Refused data (400, 422): bisect to the refused events, set them aside in
    /// `rejected.jsonl`, send the rest.
    case reject
    /// A configuration problem (401, 403, 404, 501, 505, other 4xx, anything else): keep every
    /// event, pause with backoff, report loudly.
    case pause

    /// The default action for an HTTP status.
    public init(status: Int) {
        switch status {
        case 200...299: self = .acknowledge
        case 408, 429: self = .retry
        case 413: self = .split
        case 400, 422: self = .reject
        case 501, 505: self = .pause
        case 500...599: self = .retry
        default: self = .pause
        }
    }

    /// The action for an answer: the user's classifier when it decides, else the default table.
    static func of(_ response: TransportResponse, classifier: DeliveryConfiguration.AnswerClassifier?) -> AnswerAction {
        classifier?(response.status, response.headers, response.body) ?? AnswerAction(status: response.status)
    }
}

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

enum HTTPDate {
    /// Parses an HTTP date: IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), RFC 850
    /// (`Sunday, 06-Nov-94 08:49:37 GMT`) or asctime (`Sun Nov  6 08:49:37 1994`). Seconds since 1970.
    static func parse(_ text: String) -> Int64? {
        let months = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
        var tokens: [Substring] = []
        for part in text.split(whereSeparator: { $0 == " " || $0 == "," || $0 == "-" }) where !part.isEmpty { tokens.append(part) }
        // Drop the weekday.
        if let first = tokens.first, first.first?.isLetter == true, !months.contains(first.lowercased()) { tokens.removeFirst() }
        var day: Int?, month: Int?, year: Int?, clock: [Int]?
        for token in tokens {
            if token.contains(":") {
                let parts = token.split(separator: ":").compactMap { Int($0) }
                if parts.count == 3 { clock = parts }
            } else if let m = months.firstIndex(of: token.lowercased()) {
                month = m + 1
            } else if let n = Int(token) {
                if day == nil && token.count <= 2 { day = n } else { year = n }
            }
        }
        guard let d = day, let m = month, var y = year, let c = clock, (1...31).contains(d), c[0] < 24, c[1] < 60, c[2] < 61 else { return nil }
        if y < 100 { y += y < 70 ? 2000 : 1900 }
        return daysFromCivil(y, m, d) * 86_400 + Int64(c[0] * 3600 + c[1] * 60 + c[2])
    }

    /// Days since 1970-01-01 of a proleptic Gregorian date (Howard Hinnant's algorithm).
    static func daysFromCivil(_ year: Int, _ month: Int, _ day: Int) -> Int64 {
        let y = Int64(month <= 2 ? year - 1 : year)
        let era = (y >= 0 ? y : y - 399) / 400
        let yoe = y - era * 400
        let mp = Int64((month + 9) % 12)
        let doy = (153 * mp + 2) / 5 + Int64(day) - 1
        let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy
        return era * 146_097 + doe - 719_468
    }

    /// `Retry-After`: delay seconds or an HTTP date, as a wait from `nowMillis` (never negative).
    static func retryAfter(_ value: String, nowMillis: Int64) -> Duration? {
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        if let seconds = Int64(trimmed) { return seconds >= 0 ? .seconds(seconds) : nil }
        guard let date = parse(trimmed) else { return nil }
        return .milliseconds(max(0, date * 1000 - nowMillis))
    }
}

/// The deterministic idempotency key of a request: the sequence numbers of its first and last
/// events and a 64-bit FNV-1a hash of their sequence numbers and bytes. The same events give the
/// same key in every attempt and after restarts.
enum IdempotencyKey {
    static func make(records: some Collection<ArraySlice<UInt8>>, seqs: some Collection<UInt64>) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        let prime: UInt64 = 0x0000_0100_0000_01b3
        for seq in seqs {
            var s = seq
            for _ in 0..<8 { hash = (hash ^ (s & 0xff)) &* prime; s >>= 8 }
        }
        for record in records {
            record.withUnsafeBufferPointer { buffer in
                for byte in buffer { hash = (hash ^ UInt64(byte)) &* prime }
            }
            hash = (hash ^ 0x0A) &* prime
        }
        let hex = String(hash, radix: 16)
        return "\(seqs.first ?? 0)-\(seqs.reversed().first ?? 0)-" + String(repeating: "0", count: 16 - hex.count) + hex
    }
}

/// The event time of a stored event without parsing it: the integer after its first `"time":`.
/// The tracker writes `time` before `properties`, so the first match is the top-level field.
enum EventTime {
    static let key = Array(#""time":"#.utf8)

    static func millis(in record: ArraySlice<UInt8>) -> Int64? {
        record.withUnsafeBufferPointer { buffer -> Int64? in
            let n = buffer.count, k = key.count
            guard n > k else { return nil }
            var i = 0
            while i + k < n {
                if buffer[i] == 0x22 && buffer[i + 1] == 0x74 && buffer[i + 2] == 0x69 && buffer[i + 3] == 0x6D && buffer[i + 4] == 0x65 && buffer[i + 5] == 0x22 && buffer[i + 6] == 0x3A {
                    var j = i + k
                    while j < n && buffer[j] == 0x20 { j += 1 }
                    var value: Int64 = 0
                    var digits = 0
                    while j < n, buffer[j] >= 0x30, buffer[j] <= 0x39, digits < 18 {
                        value = value * 10 + Int64(buffer[j] - 0x30)
                        j += 1
                        digits += 1
                    }
                    return digits > 0 ? value : nil
                }
                i += 1
            }
            return nil
        }
    }
}
