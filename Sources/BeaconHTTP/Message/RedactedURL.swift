import Foundation

/// A URL as it may be shown to people: its user info, query values and fragment replaced by `***`.
///
/// Collectors such as ClickHouse take credentials in the query string (`?user=…&password=…`) or
/// in the user info (`https://user:password@host/`). Beacon prints a URL only through this type,
/// so neither reaches a diagnostic, an error, a status line or a stats string, just as header
/// values never do. The scheme, host, port, path and query names stay, so the text still says
/// where requests go.
///
/// ```swift
/// let url = URL(string: "http://default:s3cret@127.0.0.1:8123/?user=default&password=s3cret")!
/// print(RedactedURL(url))   // http://***@127.0.0.1:8123/?user=***&password=***
/// ```
public struct RedactedURL: Sendable, Hashable, CustomStringConvertible {
    /// The URL's text with user info, query values and fragment replaced by `***`.
    public let description: String

    /// The redacted form of `url`.
    public init(_ url: URL) {
        self.init(text: url.absoluteString)
    }

    /// The redacted form of `text`, which need not parse as a URL (a command-line argument that
    /// was refused, for example): everything between `://` and the last `@` of the authority,
    /// each query value (after `=`, up to `&` or `;`; a query item without `=` whole) and the
    /// fragment are replaced.
    public init(text: String) {
        description = Self.redact(text)
    }

    package static let mask = "***"

    package static func redact(_ text: String) -> String {
        var rest = Substring(text)
        var fragment = ""
        if let hash = rest.firstIndex(of: "#") {
            fragment = rest.index(after: hash) == rest.endIndex ? "#" : "#" + mask
            rest = rest[..<hash]
        }
        var query = ""
        if let question = rest.firstIndex(of: "?") {
            query = "?" + redactQuery(rest[rest.index(after: question)...])
            rest = rest[..<question]
        }
        return redactUserInfo(rest) + query + fragment
    }

    /// `scheme://user:password@host/path` → `scheme://***@host/path`.
    static func redactUserInfo(_ text: Substring) -> String {
        guard let separator = text.range(of: "://") else { return String(text) }
        let authority = text[separator.upperBound...].prefix { $0 != "/" }
        guard let at = authority.lastIndex(of: "@") else { return String(text) }
        return String(text[..<separator.upperBound]) + mask + String(text[at...])
    }

    /// `a=1&b=2;c` → `a=***&b=***;***`: names stay, values go; empty values stay empty.
    static func redactQuery(_ query: Substring) -> String {
        var out = ""
        var item = Substring()
        func flush(_ item: Substring) {
            if let equals = item.firstIndex(of: "=") {
                out += item[...equals]
                if item.index(after: equals) != item.endIndex { out += mask }
            } else if !item.isEmpty {
                out += mask
            }
        }
        var start = query.startIndex
        for index in query.indices where query[index] == "&" || query[index] == ";" {
            item = query[start..<index]
            flush(item)
            out.append(query[index])
            start = query.index(after: index)
        }
        flush(query[start...])
        return out
    }

    /// `text` with every occurrence of `url`'s own text replaced by its redacted form: for
    /// messages written by others (a URL loading error) that may quote the URL.
    package static func scrub(_ text: String, of url: URL) -> String {
        let raw = url.absoluteString
        guard !raw.isEmpty, text.contains(raw) else { return text }
        return text.replacingOccurrences(of: raw, with: RedactedURL(url).description)
    }
}
