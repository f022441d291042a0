import BeaconHTTP
import Foundation

/// Masks the credentials a delivery configuration holds out of text that others wrote: a
/// collector that echoes the request in its answer (a debugging proxy, an error page quoting the
/// `Authorization` header) or a transport's message must not carry them into a ``DeliveryError``,
/// a diagnostic, the stats or `rejected.jsonl`.
///
/// The credentials are every configured header value (header values are never shown; for
/// `Bearer …`-style values the token alone too) and the URL's user and password, masked wherever
/// they appear, and the URL's query values, masked where they appear as values (`name=value`,
/// `"name":"value"`): a query value is often a plain word (`?src=chaos`), and the same word in
/// the collector's own words ("chaos says 503") is not a credential. All as written and
/// percent-decoded. Values shorter than ``minimumLength`` are left: they are not credentials, and
/// masking every `1` or `en` would garble the text.
struct CredentialScrubber: Sendable {
    static let minimumLength = 4

    /// Masked wherever they appear; longest first, so that a value holding another is masked whole.
    let secrets: [String]
    /// The URL's query values, masked only after `=` or `:` (``valuePrefixes``); longest first.
    let queryValues: [String]
    /// What comes before a value: `name=value`, `"name":"value"`, `"name": "value"`.
    static let valuePrefixes = ["=", "\":\"", "\": \""]

    init(configuration: DeliveryConfiguration) {
        var found: Set<String> = []
        var query: Set<String> = []
        for field in configuration.headers {
            let value = field.value.trimmingCharacters(in: .whitespaces)
            found.insert(value)
            if let space = value.firstIndex(of: " ") {
                found.insert(value[space...].trimmingCharacters(in: .whitespaces))
            }
        }
        if let url = URLComponents(url: configuration.url, resolvingAgainstBaseURL: false) {
            let items = (url.queryItems ?? []) + (url.percentEncodedQueryItems ?? [])
            found.formUnion([url.user, url.password, url.percentEncodedUser, url.percentEncodedPassword].compactMap { $0 })
            query.formUnion(items.compactMap(\.value))
        }
        secrets = found.filter { $0.count >= Self.minimumLength }.sorted { $0.count > $1.count }
        queryValues = query.subtracting(found).filter { $0.count >= Self.minimumLength }.sorted { $0.count > $1.count }
    }

    /// `text` with every credential replaced by `***`.
    func scrub(_ text: String) -> String {
        var text = text
        for secret in secrets where text.contains(secret) {
            text = text.replacingOccurrences(of: secret, with: RedactedURL.mask)
        }
        for value in queryValues where text.contains(value) {
            for prefix in Self.valuePrefixes {
                text = text.replacingOccurrences(of: prefix + value, with: prefix + RedactedURL.mask)
            }
        }
        return text
    }

    /// The start of `body` as text (``AnswerExcerpt/text(_:limit:)``) without credentials. The
    /// whole body is masked before the cut: masking shortens the text, so a credential cut off
    /// past any window could move into the excerpt. Only answers that are reported are read so.
    func excerpt(_ body: [UInt8], limit: Int) -> String {
        guard !secrets.isEmpty || !queryValues.isEmpty else { return AnswerExcerpt.text(body, limit: limit) }
        return AnswerExcerpt.text(Array(scrub(String(decoding: body, as: UTF8.self)).utf8), limit: limit)
    }
}
