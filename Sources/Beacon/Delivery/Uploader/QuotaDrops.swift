import BeaconLog
import Synchronization

/// What the log's quota deleted before delivery, since a tracker or an uploader opened, and the
/// diagnostic about it.
///
/// The count is the log's own (`LogStats.dropped[.quotaDeleted]`) minus its value at opening, so records
/// that were deleted while in flight and then delivered are not counted. The diagnostic is written
/// on the first drop and then at most once every `interval`, with the count so far.
final class QuotaDrops: Sendable {
    let atOpen = Atomic<UInt64>(0)
    let lastReport = Mutex<ContinuousClock.Instant?>(nil)
    let interval: Duration

    init(interval: Duration = .seconds(10)) {
        self.interval = interval
    }

    /// Records the log's count when it was opened: only drops after it are reported.
    func opened(_ log: BeaconLog) {
        atOpen.store(log.stats.dropped[.quotaDeleted, default: 0], ordering: .relaxed)
    }

    /// Events deleted by the quota since opening, never delivered.
    func count(_ log: BeaconLog) -> UInt64 {
        count(in: log.stats)
    }

    func count(in stats: LogStats) -> UInt64 {
        let now = stats.dropped[.quotaDeleted, default: 0]
        let before = atOpen.load(ordering: .relaxed)
        return now > before ? now - before : 0
    }

    /// The diagnostic for a drop of `records` from a log whose quota is `maxBytes`, or nil while
    /// rate-limited.
    func message(dropped records: UInt64, maxBytes: Int64) -> String? {
        let now = ContinuousClock.now
        let due = lastReport.withLock { last -> Bool in
            if let last, now - last < interval { return false }
            last = now
            return true
        }
        guard due else { return nil }
        return "the log reached its quota (maxBytes \(maxBytes)) and deleted its oldest \(records) pending events before they were delivered (counted in stats.dropped[.quotaDeleted]); deliver faster (is the collector reachable?), raise maxBytes, or use quotaPolicy .rejectNew to refuse new events instead"
    }
}

extension Uploader {
    /// `result` with the events lost since the uploader started: deleted by the log's quota,
    /// rejected by the collector or expired (both set aside in `rejected.jsonl`).
    func reportingLosses(_ result: FlushResult) -> FlushResult {
        var result = result
        for (reason, count) in [(DropReason.quotaDeleted, quotaDrops.count(log)), (.rejected, counters.rejectedEvents), (.expired, counters.expiredEvents)] where count > 0 {
            result.dropped[reason] = count
        }
        return result
    }
}
