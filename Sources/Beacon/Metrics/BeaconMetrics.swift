import BeaconLog
import Foundation

/// Every figure an operator watches, in one typed snapshot: the backlog and its age, what was
/// sent and how the collector answered, what was lost and why, and the writer's commit latency.
///
/// Take one from a tracker (``Beacon/metrics``) or an uploader (``Uploader/metrics``); render it
/// for Prometheus with ``prometheusText(_:)`` or read the fields. Counters count since the tracker
/// or uploader started, except the loss counters kept on disk (``corruptSkipped``, the log's
/// `quotaDeleted`), which count since the directory was created.
///
/// ```swift
/// let metrics = await beacon.metrics
/// print(metrics.pendingRecords, metrics.oldestPending?.age ?? .zero)
/// ```
public struct BeaconMetrics: Sendable, Equatable {
    /// Records in the log the collector has not acknowledged (an upper bound when some are corrupt).
    public var pendingRecords: UInt64 = 0
    /// Bytes on disk of those records, framing included.
    public var pendingBytes: UInt64 = 0
    /// How old the oldest pending event is; nil when nothing is pending on disk.
    public var oldestPending: PendingAge?
    /// Bytes of records in segment files: what the quota counts.
    public var diskBytes: UInt64 = 0
    /// The quota (`BeaconLog.Configuration.maxBytes`).
    public var maxDiskBytes: UInt64 = 0

    /// Events the collector accepted (2xx).
    public var sentEvents: UInt64 = 0
    /// Requests answered 2xx.
    public var sentRequests: UInt64 = 0
    /// Body bytes of accepted requests, as sent (after gzip).
    public var sentBytes: UInt64 = 0
    /// Every request's outcome by class: HTTP status classes and the failures without an answer.
    public var answers: [AnswerClass: UInt64] = [:]
    /// Requests sent again after a failure.
    public var retries: UInt64 = 0
    /// Events set aside in `rejected.jsonl`, by reason (`DropReason.rejected`, `DropReason.expired`).
    public var setAside: [DropReason: UInt64] = [:]
    /// Events that will never be delivered and are not in `rejected.jsonl`, by reason: the
    /// tracker's (backpressure, closed, the log's refusals) and the quota's deletions.
    public var dropped: [DropReason: UInt64] = [:]
    /// Corrupt records passed over while reading, by reason (since the directory was created).
    public var corruptSkipped: [CorruptionReason: UInt64] = [:]
    /// When the collector last accepted a request (wall clock); nil before the first.
    public var lastSuccess: Date?
    /// How long each request took, answered or failed (cancelled ones are not counted).
    public var requestDuration = Histogram(bounds: Histogram.requestBounds)
    /// Requests sent and not answered yet.
    public var requestsInFlight: Int = 0
    /// Events in those requests.
    public var eventsInFlight: Int = 0
    /// True while delivery is paused: a collector outage or refusal, retried with backoff.
    public var deliveryPaused = false
    /// How long each of the writer's group commits took (the `write`, and the `fsync` when one is
    /// due); nil where nothing writes (``Uploader``, `beacon send`).
    public var writerCommitDuration: Histogram?
    /// True while a commit has been running for more than a second (a stalled disk).
    public var writerStalled = false

    /// Every figure zero or absent: a tracker or log that has done nothing yet.
    public init() {}

    /// The age of the oldest pending event, and where it comes from.
    public struct PendingAge: Sendable, Equatable {
        /// Where ``age`` comes from.
        public enum Source: String, Sendable {
            /// The event's own `time` field (milliseconds since 1970, as the tracker writes it).
            case eventTime = "time"
            /// The record has no `time`: the age of the segment file it was appended to (its
            /// creation time), which it cannot exceed; a slight overestimate.
            case appended
        }

        /// Now minus the event's time (zero when the event's time is in the future).
        public var age: Duration
        /// Where the age comes from.
        public var source: Source
        /// The oldest pending record's sequence number.
        public var seq: UInt64

        /// The age of record `seq`, measured from `source`.
        public init(age: Duration, source: Source, seq: UInt64) {
            self.age = age
            self.source = source
            self.seq = seq
        }
    }

    /// How a request ended.
    public enum AnswerClass: String, Sendable, CaseIterable {
        /// An answer of the class its raw value names (`1xx` … `5xx`).
        case informational = "1xx", success = "2xx", redirection = "3xx", clientError = "4xx", serverError = "5xx"
        /// No answer in time (the request timeout).
        case timeout
        /// A connection failure: refused, reset, unreachable, DNS.
        case network
        /// TLS failed (a certificate that fails verification, a handshake refused).
        case tls

        /// The class of an HTTP status.
        public init(status: Int) {
            switch status {
            case ..<200: self = .informational
            case 200..<300: self = .success
            case 300..<400: self = .redirection
            case 400..<500: self = .clientError
            default: self = .serverError
            }
        }
    }

    /// Observations counted into fixed buckets, as Prometheus keeps a histogram.
    public struct Histogram: Sendable, Equatable {
        /// The buckets' upper bounds in seconds, ascending (`+Inf` is implied).
        public var bounds: [Double]
        /// Observations at or below each bound and above the one before (not cumulative); one more
        /// entry for those above the last bound.
        public var counts: [UInt64]
        /// Observations.
        public var count: UInt64 = 0
        /// Their sum, in seconds.
        public var sum: Double = 0

        /// An empty histogram with these bounds.
        public init(bounds: [Double]) {
            self.bounds = bounds
            self.counts = Array(repeating: 0, count: bounds.count + 1)
        }

        /// Counts one observation.
        public mutating func observe(_ duration: Duration) {
            let seconds = Double(duration.components.seconds) + Double(duration.components.attoseconds) * 1e-18
            var i = 0
            while i < bounds.count && seconds > bounds[i] { i += 1 }
            counts[i] += 1
            count += 1
            sum += seconds
        }

        /// Requests: 5 ms to 60 s.
        public static let requestBounds: [Double] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60]
        /// Group commits: 100 µs to 10 s.
        public static let commitBounds: [Double] = [0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10]
    }
}

extension BeaconMetrics.PendingAge {
    /// The age of `log`'s oldest pending event at `nowMillis`: one small read at the checkpoint
    /// (``BeaconLog/oldestPendingRecord()``), never the backlog. Nil when nothing is pending on disk.
    package static func of(_ log: BeaconLog, nowMillis: Int64) -> Self? {
        guard let head = log.oldestPendingRecord() else { return nil }
        let millis: Int64, source: Source
        if let time = EventTime.millis(in: head.event) {
            (millis, source) = (time, .eventTime)
        } else if let created = head.segmentCreatedMillis {
            (millis, source) = (created, .appended)
        } else {
            return nil
        }
        return Self(age: .milliseconds(max(0, nowMillis - millis)), source: source, seq: head.seq)
    }
}
