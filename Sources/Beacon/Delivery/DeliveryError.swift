/// Why a delivery request failed.
public struct DeliveryError: Error, Sendable, CustomStringConvertible {
    /// The kind of failure; the set may grow.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        public let name: String
        public init(_ name: String) { self.name = name }
        public var description: String { name }
        /// A transient failure: network error, timeout, 408, 429, 5xx. Retried with backoff.
        public static let transient = Code("transient")
        /// A configuration problem: 401, 403, 404, 501, 505 or another 4xx. Paused with backoff.
        public static let configuration = Code("configuration")
        /// Reading the log or writing `rejected.jsonl` failed.
        public static let storage = Code("storage")
        /// The uploader was shut down.
        public static let stopped = Code("stopped")
    }

    /// The kind of failure.
    public var code: Code
    /// What happened and what to do.
    public var message: String
    /// The HTTP status, when the collector answered.
    public var status: Int?

    public init(_ code: Code, _ message: String, status: Int? = nil) {
        self.code = code
        self.message = message
        self.status = status
    }

    public var description: String { "delivery \(code): \(message)" }
}
