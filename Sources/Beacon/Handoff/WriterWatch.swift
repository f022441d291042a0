import BeaconLog
import Synchronization

/// Watches the writer thread's group commits: their latency (a histogram for ``BeaconMetrics``),
/// a commit that has not completed for more than ``stallThreshold`` (a stalled disk: reported once
/// as `"stalled"`, then `"recovered"` when it completes), and the disk use against the quota
/// (``QuotaWatch``).
///
/// The writer calls ``commitBegan()`` and ``commitEnded()`` around each `append` (two clock reads,
/// three uncontended locks and the sum of the segment sizes per commit, not per record). Nothing runs while the writer is idle:
/// the first commit after a quiet second arms one check a second later, which re-arms itself only
/// while a commit is running.
final class WriterWatch: Sendable {
    static let stallThreshold: Duration = .seconds(1)

    struct State: Sendable {
        var commitStarted: UInt64?
        var stalledSince: UInt64?
        var checkArmed = false
        var histogram = BeaconMetrics.Histogram(bounds: BeaconMetrics.Histogram.commitBounds)
        var quota = QuotaWatch()
        var report: (@Sendable (BeaconDiagnostic) -> Void)?
        var log: BeaconLog?
        var closed = false
    }

    let state = Mutex(State())
    let now: @Sendable () -> UInt64

    init(now: @escaping @Sendable () -> UInt64 = monotonicNanoseconds) {
        self.now = now
    }

    /// Where reports go and which log's quota is watched; nothing is reported before.
    func configure(log: BeaconLog, report: @escaping @Sendable (BeaconDiagnostic) -> Void) {
        state.withLock {
            $0.log = log
            $0.report = report
        }
    }

    /// No more checks or reports (the tracker closed). Lets go of the log and the sink: the log's
    /// `onDropped` holds this watch, so keeping the log here would make a cycle that outlives the
    /// tracker (LeakSanitizer reported it in `beacon track`, which exits after closing).
    func close() {
        state.withLock {
            $0.closed = true
            $0.log = nil
            $0.report = nil
        }
    }

    /// The writer starts a commit.
    func commitBegan() {
        let started = now()
        let arm = state.withLock { s -> Bool in
            s.commitStarted = started
            guard !s.checkArmed, !s.closed else { return false }
            s.checkArmed = true
            return true
        }
        if arm { schedule(after: Self.stallThreshold) }
    }

    /// The writer's commit ended (written, or refused): its latency is counted; a stall ends.
    func commitEnded() {
        let ended = now()
        let (recovered, quotaLog) = state.withLock { s -> (BeaconDiagnostic?, BeaconLog?) in
            var recovered: BeaconDiagnostic?
            if let started = s.commitStarted {
                s.histogram.observe(.nanoseconds(Int64(ended &- started)))
                if s.stalledSince != nil, s.report != nil {
                    let seconds = Double(ended &- started) / 1e9
                    recovered = BeaconDiagnostic(kind: .storage, message: "the writer recovered: a commit completed after \(Self.tenths(seconds)) s (the disk stalled); records flow to the log again", subject: "recovered", severity: .notice)
                }
            }
            s.commitStarted = nil
            s.stalledSince = nil
            return (recovered, s.log)
        }
        if let recovered, let sink = state.withLock({ $0.report }) { sink(recovered) }
        if let quotaLog { checkQuota(quotaLog, refused: false) }
    }

    /// The log's quota was reached: it deleted records or refused some.
    func quotaActed() {
        guard let log = state.withLock({ $0.log }) else { return }
        checkQuota(log, refused: true)
    }

    func checkQuota(_ log: BeaconLog, refused: Bool) {
        let maxBytes = UInt64(max(1, log.configuration.maxBytes))
        let used = log.diskBytesInUse
        let report = state.withLock { s -> (BeaconDiagnostic, (@Sendable (BeaconDiagnostic) -> Void))? in
            guard let sink = s.report, let level = s.quota.observe(used: used, max: maxBytes, reached: refused) else { return nil }
            let percent = used * 100 / maxBytes
            let policy = log.configuration.quotaPolicy == .dropOldest ? "the oldest pending events are deleted to make room (counted as dropped, quotaDeleted)" : "new events are refused (counted as dropped, quotaExceeded)"
            let diagnostic: BeaconDiagnostic
            if level == 100 {
                diagnostic = BeaconDiagnostic(kind: .storage, message: "the log \(log.configuration.directory) reached its quota (\(used) of \(maxBytes) bytes, maxBytes): \(policy). Delivery is behind: check the collector, or raise maxBytes", subject: "quota100", severity: .error)
            } else {
                diagnostic = BeaconDiagnostic(kind: .storage, message: "the log \(log.configuration.directory) uses \(percent) % of its quota (\(used) of \(maxBytes) bytes, maxBytes); at 100 % \(policy)", subject: "quota80", severity: .warning)
            }
            return (diagnostic, sink)
        }
        if let (diagnostic, sink) = report { sink(diagnostic) }
    }

    /// Commit latencies so far, and whether a commit is stalled now.
    var snapshot: (histogram: BeaconMetrics.Histogram, stalled: Bool) {
        state.withLock { ($0.histogram, $0.stalledSince != nil) }
    }

    func schedule(after delay: Duration) {
        // The check tells the diagnostics sink (the application's code): on the pool, not on the
        // timer's thread, which every deadline of the process shares.
        TimerThread.shared.add(after: delay) { [weak self] in
            BlockingPool.shared.submit { [weak self] in self?.check() }
        }
    }

    /// The timer's check: a commit running for more than the threshold is a stall (reported once);
    /// while one runs, looks again when it would reach the threshold; idle, disarms.
    func check() {
        let current = now()
        let threshold = UInt64(Self.stallThreshold.components.seconds) * 1_000_000_000
        let (stalled, again) = state.withLock { s -> (BeaconDiagnostic?, UInt64?) in
            guard !s.closed, let started = s.commitStarted else {
                s.checkArmed = false
                return (nil, nil)
            }
            let running = current &- started
            if running < threshold { return (nil, threshold - running) }
            guard s.stalledSince == nil else {
                s.checkArmed = false  // reported; the commit's end reports the recovery
                return (nil, nil)
            }
            s.stalledSince = started &+ threshold
            s.checkArmed = false
            guard s.report != nil else { return (nil, nil) }
            return (BeaconDiagnostic(kind: .storage, message: "the writer has not completed a commit for \(Self.tenths(Double(running) / 1e9)) s: the disk is stalled (write or fsync). Events queue in memory and are dropped when the hand-off is full (backpressure)", subject: "stalled", severity: .warning), nil)
        }
        if let stalled { state.withLock { $0.report }?(stalled) }
        if let again { schedule(after: .nanoseconds(Int64(again))) }
    }

    static func tenths(_ seconds: Double) -> String {
        let tenths = Int((seconds * 10).rounded())
        return "\(tenths / 10).\(tenths % 10)"
    }
}

/// The quota's thresholds, reported once each on the way up: 80 % (warning) and 100 % (error,
/// also when the quota acts: a deletion or refusal). Falling back below 70 % (below 50 % for
/// 100 %, which a deletion of one segment out of a few may reach) lets the same threshold be
/// reported again, so a log hovering at a threshold reports it once.
struct QuotaWatch: Sendable, Equatable {
    private(set) var reported80 = false
    private(set) var reported100 = false

    /// The threshold to report now (80 or 100), if any.
    mutating func observe(used: UInt64, max: UInt64, reached: Bool) -> Int? {
        let percent = Double(used) / Double(Swift.max(1, max)) * 100
        if percent < 70 { reported80 = false }
        if percent < 50 && !reached { reported100 = false }
        if (percent >= 100 || reached) && !reported100 {
            reported100 = true
            reported80 = true
            return 100
        }
        if percent >= 80 && !reported80 {
            reported80 = true
            return 80
        }
        return nil
    }
}
