import BeaconHTTP
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
