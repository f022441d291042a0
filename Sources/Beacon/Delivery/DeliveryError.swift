import BeaconHTTP

/// Why delivery did not get events to the collector: what failed, what to do, and the cause (the
/// collector's status and the start of its answer, the transport's error, or the storage error).
///
/// ```swift
/// if case .failed(let error) = await beacon.flush().outcome, error.code == .configuration {
///     print(error.message, error.status ?? 0, error.answer ?? "")
/// }
/// ```
///
/// Compare ``code`` with the static codes; the set may grow, so keep a default case.
public struct DeliveryError: Error, Sendable, CustomStringConvertible {
    /// The kind of failure. Only the library makes codes; the set may grow.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Kind: String, Sendable {
            case transient, configuration, rejected, storage, stopped
        }

        private let kind: Kind
        private init(_ kind: Kind) { self.kind = kind }

        /// A stable identifier without spaces, for metric labels: `"transient"`.
        public var name: String { kind.rawValue }
        public var description: String { name }

        /// A transient failure: network error, timeout, 408, 429, 5xx. Retried with backoff.
        public static let transient = Code(.transient)
        /// A configuration problem: 401, 403, 404, 501, 505 or another 4xx, a certificate that
        /// fails verification, no collector configured. Paused with backoff.
        public static let configuration = Code(.configuration)
        /// The collector refused events for good (400, 422, 413 for one event alone, or an event
        /// that kept failing alone while others were delivered): they were set aside in
        /// `rejected.jsonl` and delivery went on. Reported through diagnostics
        /// (``BeaconDiagnostic/deliveryError``), never as a flush's failure.
        public static let rejected = Code(.rejected)
        /// Reading the log, writing `rejected.jsonl`, `delivery.inflight` or the checkpoint failed.
        public static let storage = Code(.storage)
        /// The uploader was shut down.
        public static let stopped = Code(.stopped)
    }

    /// The kind of failure.
    public var code: Code
    /// What happened and what to do.
    public var message: String
    /// The HTTP status, when the collector answered.
    public var status: Int?
    /// The start of the collector's answer body as text, when it answered: at most 512 bytes
    /// (with a trailing `…` when cut), control characters shown as spaces, empty for an empty
    /// body. The configured header values and the URL's credentials are masked as `***`, even
    /// when the collector echoes them.
    public var answer: String?
    /// The error behind it: the ``TransportError`` when no answer came (timeout, connection
    /// refused, TLS), the `BeaconLogError` when storage failed; nil when the collector answered.
    public var cause: (any Error)?

    /// An error with its code and sentence; `status`, `answer` and `cause` when there are any.
    /// Transports and tests build them; delivery reports them.
    public init(_ code: Code, _ message: String, status: Int? = nil, answer: String? = nil, cause: (any Error)? = nil) {
        self.code = code
        self.message = message
        self.status = status
        self.answer = answer
        self.cause = cause
    }

    public var description: String { "delivery error (\(code)): \(message)" }
}
