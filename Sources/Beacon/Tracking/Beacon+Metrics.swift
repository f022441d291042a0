import BeaconLog
import Foundation

extension Beacon {
    /// Every figure an operator watches, in one snapshot (``BeaconMetrics``): the backlog and the
    /// age of its oldest event, delivery's counters, answers and request durations, the losses by
    /// reason, and the writer's commit latency. Cheap enough to take on every scrape: the age is
    /// one small read at the checkpoint, whatever the backlog. It never waits for the uploader or
    /// the writer (their figures are kept behind locks of their own), so it answers while the disk
    /// stalls: that is when an operator looks.
    ///
    /// ```swift
    /// router.get("/metrics") { _, _ in (await beacon.metrics).prometheusText() }
    /// ```
    public var metrics: BeaconMetrics {
        get async {
            var m: BeaconMetrics
            if let uploader = delivery.uploader {
                m = uploader.metrics
            } else {
                m = BeaconMetrics()
                Uploader.fill(&m, log: log, nowMillis: Int64((configuration.wallClock().timeIntervalSince1970 * 1000).rounded(.down)))
                m.dropped[.quotaDeleted] = quotaDrops.count(log)
            }
            for (reason, count) in stats.dropped where reason != .quotaDeleted { m.dropped[reason, default: 0] += count }
            let watched = writer.watch.snapshot
            m.writerCommitDuration = watched.histogram
            m.writerStalled = watched.stalled
            return m
        }
    }
}
