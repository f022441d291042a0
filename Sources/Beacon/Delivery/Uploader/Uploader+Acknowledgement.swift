import BeaconLog

/// Acknowledging delivered batches: the checkpoint writes (fdatasync) grouped and overlapped with
/// the next requests, and settled before a pass ends.
extension Uploader {
    /// The acknowledgement of a whole batch delivered while more events wait, made durable with
    /// the next ones while the next requests go out. A checkpoint write (an fdatasync) takes
    /// as long as dozens of requests on loopback; one write for a group of at least
    /// ``acknowledgementGroup`` batches makes its cost a fraction. Until they are settled the next
    /// batch is read from the last one's `end`, and `delivery.inflight` keeps their `range`s,
    /// marked accepted, beside the next request's: a process crash in between (the page cache
    /// survives) re-sends none of them, a power loss re-sends them as they were sent (same events,
    /// same idempotency keys), which at-least-once delivery allows.
    ///
    /// Batches delivered back to back while a write runs gather into one entry (one range of
    /// `delivery.inflight`, their ranges joined): a checkpoint write takes about as long as
    /// dozens of requests on loopback, and the next write then covers all of them.
    struct Acknowledging: Sendable {
        var end: LogPosition
        /// The ranges of its batches in `delivery.inflight` (one per batch; none when unknown).
        var ranges: [InflightFile.Range]
        /// The checkpoint write, once started: nil when it succeeded, else its error.
        var write: Started<(any Error)?>?
        /// The batches this entry acknowledges.
        var batches = 1
    }

    /// Batches whose acknowledgements gather before a checkpoint write starts (while a backlog lasts).
    static let acknowledgementGroup = 4
    /// The most entries outstanding at once (the ranges `delivery.inflight` keeps beside the
    /// request in flight): usually two, a group being written and the next one gathering.
    static let maxOutstandingAcknowledgements = 2 * acknowledgementGroup
    /// The most batches whose acknowledgements are outstanding at once: what a power loss may send
    /// again beyond the request in flight.
    static let maxOutstandingBatches = 64

    /// Adds the acknowledgement of a whole batch delivered while more events wait: into the entry
    /// gathering when it continues that entry's range, else as an entry of its own. Call after
    /// ``settleAcknowledgement(keeping:)`` made room (``roomForAcknowledgement``).
    func deferAcknowledgement(end: LogPosition, range: InflightFile.Range?) {
        let accepted = range.map { InflightFile.Range(firstSeq: $0.firstSeq, count: $0.count, sends: $0.sends, failures: $0.failures, accepted: true) }
        // Joined only when `delivery.inflight` writes them on one line.
        if let last = acknowledging.last, last.write == nil, let earlier = last.ranges.last, let accepted, InflightFile.sharesLine(earlier, accepted) {
            acknowledging[acknowledging.count - 1].end = end
            acknowledging[acknowledging.count - 1].ranges.append(accepted)
            acknowledging[acknowledging.count - 1].batches += 1
            return
        }
        acknowledging.append(Acknowledging(end: end, ranges: accepted.map { [$0] } ?? []))
    }

    /// The entries to keep outstanding so that one more batch fits: at most
    /// ``maxOutstandingAcknowledgements`` - 1 entries and ``maxOutstandingBatches`` - 1 batches,
    /// the newest.
    var roomForAcknowledgement: Int {
        var keep = 0, batches = 0
        for entry in acknowledging.reversed() {
            guard keep < Self.maxOutstandingAcknowledgements - 1, batches + entry.batches < Self.maxOutstandingBatches else { break }
            keep += 1
            batches += entry.batches
        }
        return keep
    }

    /// Starts a checkpoint write through the last deferred acknowledgement, covering all those not
    /// started yet: when a group has gathered and no write is running, or at once when `now`.
    /// Started as a request goes out, after the read ahead of the batch after it: reading and
    /// acknowledging share the log's reader lock, and the read is needed first.
    func startAcknowledgement(now: Bool = false) {
        guard let last = acknowledging.last, last.write == nil else { return }
        if !now {
            let waiting = acknowledging.reduce(0) { $0 + ($1.write == nil ? $1.batches : 0) }
            let writing = acknowledging.contains { $0.write?.isFinished == false }
            guard waiting >= Self.acknowledgementGroup && !writing else { return }
        }
        let log = self.log, end = last.end
        let write = ioQueue.start { () -> (any Error)? in
            do {
                try log.acknowledge(through: end)
                return nil
            } catch {
                return error
            }
        }
        for i in acknowledging.indices where acknowledging[i].write == nil { acknowledging[i].write = write }
    }

    /// Whether work for after `session` may overlap the next request (its acknowledgement, or
    /// reading the next batch ahead): only while at least `events` more wait beyond it (a
    /// backlog; at the log's end the next read would find little or nothing) and, when this
    /// process writes the log, while it is far from its quota: a quota drop here deleting the
    /// batch before its acknowledgement lands, with the next batch already read, would count
    /// delivered events as dropped.
    ///
    /// When another process writes (`beacon send`), the log knows the events that were there at
    /// opening and those read since: then a full batch also says that more may wait.
    func canOverlap(after session: Session, waiting events: Int = 1, stats: LogStats? = nil) -> Bool {
        let stats = stats ?? log.stats
        guard log.configuration.access == .readWrite else {
            return stats.nextSeq >= session.batch.end.seq + UInt64(events) || session.batch.count >= configuration.eventsPerRequest(pending: stats.pendingRecords)
        }
        guard stats.nextSeq >= session.batch.end.seq + UInt64(events) else { return false }
        let margin = UInt64(4 * max(configuration.maxBatchBytes, 1 << 20))
        return stats.diskBytes + margin < UInt64(max(0, log.configuration.maxBytes)) / 2
    }

    /// Waits until the deferred acknowledgements but the last `keeping` are durable (writing
    /// them now if needed); throws the first error. After an error none is kept: the next batch is
    /// read from the durable checkpoint again, and the batches whose acknowledgement failed are
    /// sent again (at least once).
    func settleAcknowledgement(keeping: Int = 0) async throws {
        // Those already durable leave first, without waiting.
        while let result = acknowledging.first?.write?.result, result == nil { acknowledging.removeFirst() }
        var keep = keeping
        if case .some(.some) = acknowledging.first?.write?.result { keep = 0 }  // one failed
        guard acknowledging.count > keep else { return }
        if acknowledging[acknowledging.count - 1 - keep].write == nil { startAcknowledgement(now: true) }
        var failure: (any Error)?
        while acknowledging.count > keep {
            let error = await acknowledging[0].write?.value
            acknowledging.removeFirst()
            failure = failure ?? error
        }
        if let failure {
            acknowledging.removeAll()
            throw failure
        }
    }

    /// Acknowledges `batch`, which `range` of `delivery.inflight` says the collector accepted
    /// before this process's predecessor crashed: with the group of deferred acknowledgements.
    func acknowledgeAccepted(_ batch: LogBatch, _ range: InflightFile.Range) async throws {
        do {
            try await settleAcknowledgement(keeping: roomForAcknowledgement)
        } catch {
            throw storageFailure(error, doing: "acknowledging delivered events").error
        }
        deferAcknowledgement(end: batch.end, range: range)
        startAcknowledgement()
    }
}
