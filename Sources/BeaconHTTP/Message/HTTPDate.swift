import Foundation
#if canImport(Glibc)
import Glibc
#endif

/// HTTP dates, both ways: the uploader parses `Date` and `Retry-After`; the loopback collector
/// formats its `Date` header.
package enum HTTPDate {
    /// IMF-fixdate, for example `Sun, 06 Nov 1994 08:49:37 GMT`.
    package static func format(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        let days = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"]
        let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]
        func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(days[Int(parts.tm_wday)]), \(two(parts.tm_mday)) \(months[Int(parts.tm_mon)]) \(parts.tm_year + 1900) \(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec)) GMT"
    }

    /// Parses an HTTP date: IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), RFC 850
    /// (`Sunday, 06-Nov-94 08:49:37 GMT`) or asctime (`Sun Nov  6 08:49:37 1994`). Seconds since 1970.
    package static func parse(_ text: String) -> Int64? {
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
    package static func retryAfter(_ value: String, nowMillis: Int64) -> Duration? {
        let trimmed = value.trimmingCharacters(in: .whitespaces)
        if let seconds = Int64(trimmed) { return seconds >= 0 ? .seconds(seconds) : nil }
        guard let date = parse(trimmed) else { return nil }
        return .milliseconds(max(0, date * 1000 - nowMillis))
    }
}
