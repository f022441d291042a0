import BeaconHTTP
import Foundation

/// How events are delivered to a collector. Every property has a documented default.
///
/// ```swift
/// var delivery = DeliveryConfiguration(url: URL(string: "https://collector.example.com/events")!)
/// delivery.headers["Authorization"] = "Bearer …"
/// ```
public struct DeliveryConfiguration: Sendable {
    /// The collector endpoint; every batch is POSTed here.
    public var url: URL
    /// The most events per request. Default 50.
    public var batchSize: Int = 50
    /// The most events per request while more than one batch is pending (a backlog after an
    /// outage or a burst), still capped by `maxBatchBytes`; nil (the default) sends as many as
    /// `maxBatchBytes` holds. Small batches keep latency low in steady state; big ones drain a
    /// backlog at the collector's bulk rate (one round trip per megabyte, not per 50 events).
    /// Set it to `batchSize` to always send `batchSize` events, or lower `maxBatchBytes` for a
    /// collector that refuses big bodies (a 413 splits a request in any case).
    public var catchUpBatchSize: Int?
    /// The most event bytes per request (at least one event is always sent). Default 1 MiB.
    public var maxBatchBytes: Int = 1 << 20
    /// The most requests in flight at once: while batches go through, up to this many are
    /// pipelined on the one keep-alive connection (HTTP/1.1), so a collector far away is not
    /// left idle for a round trip per batch. The window starts at one request and adapts to the
    /// collector (one more per round trip while latency holds, 10 % fewer when it pushes back or
    /// latency rises); a collector that does not take pipelined requests gets one at a time. With
    /// no failure a collector receives the log's order; after a failure, a request's events may
    /// arrive after those of at most `maxRequestsInFlight - 1` requests sent behind it. Used by
    /// the default transport (``SocketTransport``); 1 sends one request at a time. Default 8.
    public var maxRequestsInFlight: Int = 8
    /// Flush when at least this many events are pending. Default 100.
    public var flushBulkSize: Int = 100
    /// Flush periodically at this interval; values below 5 s are raised to 5 s; `nil` turns
    /// periodic flushing off (manual and count-triggered flushes only). Default 15 s.
    public var flushInterval: Duration? = .seconds(15)
    /// How long one request may take. Default 30 s.
    public var requestTimeout: Duration = .seconds(30)
    /// The body format. Default ``PayloadFormat/jsonArray``.
    public var format: PayloadFormat = .jsonArray
    /// Compress bodies with gzip (`Content-Encoding: gzip`). Default off.
    public var gzip: Bool = false
    /// Extra header fields on every request (for example `Authorization`), in order. Never logged.
    public var headers: HTTPHeaders = [:]
    /// Retry timing after failures.
    public var backoff: Backoff = Backoff()
    /// Failed attempts at the same batch (retryable answers: 5xx, 408, 429, timeout, network
    /// error) before it is isolated by bisection, so that one bad event cannot stall the queue:
    /// the event that keeps failing while other requests succeed is set aside in
    /// `rejected.jsonl`. While every request fails (an outage) nothing is set aside. Default 3.
    public var isolateAfterFailures: Int = 3
    /// Decides what a collector's answer means, for collectors with their own conventions;
    /// return nil to use the default table (``AnswerAction/init(status:)``). Default nil.
    ///
    /// ```swift
    /// // This collector answers 200 with {"error":…} for refused batches.
    /// delivery.classifyAnswer = { status, headers, body in
    ///     status == 200 && body.starts(with: Array(#"{"error""#.utf8)) ? .reject : nil
    /// }
    /// ```
    public var classifyAnswer: AnswerClassifier?

    /// Reads a collector's answer: its status, header fields and body.
    public typealias AnswerClassifier = @Sendable (_ status: Int, _ headers: HTTPHeaders, _ body: [UInt8]) -> AnswerAction?
    /// Events older than this (by their top-level `"time"` field, epoch ms) are set aside as
    /// expired instead of sent: written to `rejected.jsonl` with reason `"expired"` and counted.
    /// `nil` (the default) never expires events.
    public var maxEventAge: Duration?

    /// A configuration for `url` with the defaults.
    public init(url: URL) {
        self.url = url
    }

    /// Throws ``DeliveryError/Code/configuration`` naming the first value out of range.
    func validate() throws {
        for (name, value) in [("batchSize", batchSize), ("maxBatchBytes", maxBatchBytes), ("flushBulkSize", flushBulkSize),
                              ("isolateAfterFailures", isolateAfterFailures), ("catchUpBatchSize", catchUpBatchSize ?? 1),
                              ("maxRequestsInFlight", maxRequestsInFlight)] where value <= 0 {
            throw DeliveryError(.configuration, "DeliveryConfiguration.\(name) is \(value); use a positive number")
        }
        if requestTimeout <= .zero {
            throw DeliveryError(.configuration, "DeliveryConfiguration.requestTimeout is \(requestTimeout); use a positive duration")
        }
    }

    /// The events to read for the next request when `pending` events wait: while more than
    /// `batchSize` are pending, `catchUpBatchSize` or, by default, no count (the read stops at
    /// `maxBatchBytes`); else `batchSize`.
    func eventsPerRequest(pending: UInt64) -> Int {
        guard pending > UInt64(batchSize) else { return batchSize }
        return max(catchUpBatchSize ?? Int.max, 1)
    }

    /// `flushInterval` as it is used: at least 5 s, or nil.
    public var effectiveFlushInterval: Duration? {
        flushInterval.map { max($0, .seconds(5)) }
    }

    /// Exponential backoff with full jitter: after the n-th consecutive failure the next attempt
    /// waits a random time between zero and `min(maximum, initial × 2^(n−1))`. A `Retry-After`
    /// from the collector replaces the computed wait.
    public struct Backoff: Sendable, Equatable {
        /// The cap of the first wait. Default 1 s.
        public var initial: Duration = .seconds(1)
        /// The largest cap. Default 5 min.
        public var maximum: Duration = .seconds(300)
        /// Randomise each wait between zero and its cap (full jitter). Default on; off waits the cap.
        public var jitter: Bool = true

        /// A backoff from `initial` doubling up to `maximum`, with full jitter unless `jitter` is false.
        public init(initial: Duration = .seconds(1), maximum: Duration = .seconds(300), jitter: Bool = true) {
            self.initial = initial
            self.maximum = maximum
            self.jitter = jitter
        }

        /// The cap of the wait after `failures` consecutive failures (1, 2, …).
        public func cap(afterFailures failures: Int) -> Duration {
            guard failures > 0 else { return .zero }
            var cap = initial
            for _ in 1..<min(failures, 64) {
                if cap >= maximum { break }
                cap = cap * 2
            }
            return min(cap, maximum)
        }

        /// The wait after `failures` consecutive failures, `unit` (0..<1) choosing within the jitter.
        public func delay(afterFailures failures: Int, unit: Double = Double.random(in: 0..<1)) -> Duration {
            let cap = cap(afterFailures: failures)
            return jitter ? cap * unit : cap
        }
    }
}
