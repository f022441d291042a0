/// Counters and state of delivery since the uploader started.
public struct DeliveryStats: Sendable, Equatable {
    /// Events the collector accepted (2xx).
    public var sentEvents: UInt64 = 0
    /// Requests answered with 2xx.
    public var sentRequests: UInt64 = 0
    /// Body bytes of accepted requests, as sent (after gzip).
    public var sentBytes: UInt64 = 0
    /// Requests that failed (network error, timeout, or a status other than 2xx).
    public var failedRequests: UInt64 = 0
    /// Requests sent again after a failure (`X-Beacon-Retry` > 0).
    public var retries: UInt64 = 0
    /// Batches split in halves after a 413 or bisected after a 400/422.
    public var splits: UInt64 = 0
    /// Events the collector refused permanently, written to `rejected.jsonl`.
    public var rejectedEvents: UInt64 = 0
    /// Events set aside because they were older than `maxEventAge` (in `rejected.jsonl`, reason `"expired"`).
    public var expiredEvents: UInt64 = 0
    /// Events the log's quota deleted before they were delivered, since the uploader started
    /// (records deleted while in flight and then delivered are not counted).
    public var droppedEvents: UInt64 = 0
    /// Failures in a row; zero after a success.
    public var consecutiveFailures: Int = 0
    /// The last HTTP status received, if any.
    public var lastStatus: Int?
    /// The last failure, in words (headers are never included).
    public var lastError: String?
    /// Set while delivery is paused by a configuration problem (401, 403, 404, other 4xx): why.
    public var paused: String?
    /// The collector's clock minus ours, estimated from its `Date` header against the request's
    /// midpoint (one-second resolution). Positive: the collector is ahead.
    public var clockSkew: Duration?
    /// Events pending in the log (an upper bound when some are corrupt).
    public var pendingEvents: UInt64 = 0

    /// All counters zero, nothing pending: what a tracker without delivery reports.
    public init() {}
}
