import BeaconHTTP
import BeaconLog
import Foundation

/// What the uploader counts for ``BeaconMetrics`` beyond ``DeliveryStats``, and the pause state
/// its diagnostics report.
struct DeliveryObservations: Sendable {
    var answers: [BeaconMetrics.AnswerClass: UInt64] = [:]
    var requestDuration = BeaconMetrics.Histogram(bounds: BeaconMetrics.Histogram.requestBounds)
    var requestsInFlight = 0
    var eventsInFlight = 0
    var lastSuccessMillis: Int64?
    var health = DeliveryHealth()
}

extension Uploader {
    /// Every figure of delivery and of the log in one snapshot (``BeaconMetrics``): the backlog
    /// and the age of its oldest event (one small read at the checkpoint), what was sent, the
    /// answers by class, the request durations, losses. `writerCommitDuration` is nil: the
    /// uploader does not write (a tracker's ``Beacon/metrics`` has it).
    public var metrics: BeaconMetrics {
        var m = BeaconMetrics()
        let stats = self.stats
        Self.fill(&m, log: log, nowMillis: nowMillis)
        m.sentEvents = stats.sentEvents
        m.sentRequests = stats.sentRequests
        m.sentBytes = stats.sentBytes
        m.retries = stats.retries
        m.answers = observed.answers
        m.setAside = [.rejected: stats.rejectedEvents, .expired: stats.expiredEvents]
        m.dropped[.quotaDeleted] = stats.droppedEvents
        if stats.inDoubtEvents > 0 { m.dropped[.quotaInDoubt] = stats.inDoubtEvents }
        m.lastSuccess = observed.lastSuccessMillis.map { Date(timeIntervalSince1970: Double($0) / 1000) }
        m.requestDuration = observed.requestDuration
        m.requestsInFlight = observed.requestsInFlight
        m.requestWindow = window.effectiveLimit
        m.eventsInFlight = observed.eventsInFlight
        m.deliveryPaused = observed.health.isPaused || stats.paused != nil
        return m
    }

    /// The log's figures: backlog, its age, disk use and quota, corrupt records.
    static func fill(_ m: inout BeaconMetrics, log: BeaconLog, nowMillis: Int64) {
        let stats = log.stats
        m.pendingRecords = stats.pendingRecords
        m.pendingBytes = stats.pendingBytes
        m.diskBytes = stats.diskBytes
        // A reader beside a writer in another process knows only what it has read (and its disk
        // use only as of the last listing): look at the directory.
        if let now = log.pendingOnDisk() { (m.pendingRecords, m.pendingBytes, m.diskBytes) = now }
        m.maxDiskBytes = UInt64(max(0, log.configuration.maxBytes))
        m.corruptSkipped = stats.skippedCorruptByReason
        m.oldestPending = m.pendingRecords == 0 ? nil : BeaconMetrics.PendingAge.of(log, nowMillis: nowMillis)
    }

    /// A request of `events` events goes out.
    func observeSending(events: Int) {
        observed.requestsInFlight += 1
        observed.eventsInFlight += events
    }

    /// The request of `events` events ended after `elapsed` (cancelled ones are not counted).
    func observeAnswer(_ result: Result<TransportResponse, TransportError>, events: Int, elapsed: Duration) {
        observed.requestsInFlight -= 1
        observed.eventsInFlight -= events
        let answer: BeaconMetrics.AnswerClass
        switch result {
        case .success(let response): answer = BeaconMetrics.AnswerClass(status: response.status)
        case .failure(let error) where error.code == .cancelled: return
        case .failure(let error): answer = error.code == .timeout ? .timeout : error.code == .tls ? .tls : .network
        }
        observed.answers[answer, default: 0] += 1
        observed.requestDuration.observe(elapsed)
    }

    /// A pass ended with a failure and delivery waits for its backoff: reported once per pause
    /// (``DeliveryHealth``), as a warning; `announced` when the caller reported it loudly itself.
    func observePause(_ reason: String, error: DeliveryError, announced: Bool = false) {
        let millis = nowMillis
        guard case .paused(let heldBack) = observed.health.failed(at: time.now(), millis: millis, reason: reason, announced: announced) else { return }
        let earlier = heldBack > 0 ? " (\(heldBack) shorter pause\(heldBack == 1 ? "" : "s") since the last report not reported)" : ""
        let message = "delivery to \(RedactedURL(configuration.url)) paused since \(Self.timestamp(millis)): \(reason); \(pendingEvents) events pending, kept on disk and retried with backoff\(earlier)"
        report(BeaconDiagnostic(kind: .delivery, deliveryError: error, message: message, subject: "paused", severity: .warning))
    }

    /// The collector accepted `events` events: ends a pause, reported once.
    func observeDelivery(events: Int) {
        observed.lastSuccessMillis = nowMillis
        guard case .resumed(let after, let reason) = observed.health.delivered(at: time.now()) else { return }
        let message = "delivery to \(RedactedURL(configuration.url)) resumed after \(Self.seconds(after)) paused (\(reason)): \(events) events sent in the first request, \(pendingEvents) pending"
        report(BeaconDiagnostic(kind: .delivery, message: message, subject: "resumed", severity: .notice))
    }

    /// `2026-11-28T03:41:07Z`.
    static func timestamp(_ millis: Int64) -> String {
        var seconds = time_t(millis / 1000)
        var parts = tm()
        gmtime_r(&seconds, &parts)
        func two(_ n: Int32) -> String { n < 10 ? "0\(n)" : "\(n)" }
        return "\(parts.tm_year + 1900)-\(two(parts.tm_mon + 1))-\(two(parts.tm_mday))T\(two(parts.tm_hour)):\(two(parts.tm_min)):\(two(parts.tm_sec))Z"
    }

    /// `20.1 s`.
    static func seconds(_ duration: Duration) -> String {
        let tenths = duration.components.seconds * 10 + duration.components.attoseconds / 100_000_000_000_000_000
        return "\(tenths / 10).\(tenths % 10) s"
    }
}
