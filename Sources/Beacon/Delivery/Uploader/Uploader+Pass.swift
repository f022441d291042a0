import BeaconHTTP
import BeaconLog
import Foundation

/// A pass: batch after batch until the log is empty, a pass-ending answer, or the deadline. The
/// decisions are the state machine's; this is the I/O around them.
extension Uploader {
    struct Failure: Sendable {
        var error: DeliveryError
        var retryAfter: Duration?
    }

    enum PassOutcome: Sendable {
        case drained, noData, deadline
        case failed(Failure)
    }

    struct Pass: Sendable {
        var sent: Int
        var outcome: PassOutcome
    }

    /// The batch being delivered: the events read, those to send (expired ones left out), and
    /// the state machine deciding over the indices of `sendable`.
    struct Session: Sendable {
        var batch: LogBatch
        /// Indices in `batch` of the events to send, in order.
        var sendable: [Int]
        var machine: DeliveryStateMachine
        /// The index in `batch` of the last acknowledged record; -1 before the first.
        var ackedThrough = -1
        /// Writing `rejected.jsonl` or the acknowledgement failed: read the batch again.
        var broken = false
        /// The whole batch's payload, when it was built ahead.
        var payload: RequestBuilder.Payload?
        /// Read longer than an earlier session at the same checkpoint, to prove the collector up.
        var grown = false
        /// Every request refused while the batch was too short to prove anything: the pass goes
        /// on with a longer batch (``Uploader/nextSession()``) instead of ending.
        var growNow = false

        /// The seq the log's checkpoint has while this session is current.
        var checkpointSeq: UInt64 { ackedThrough < 0 ? batch.start.seq : batch.end(after: ackedThrough).seq }

        /// The seq of the first record not acknowledged yet: `delivery.inflight`'s range starts
        /// there. After a gap the quota left it is past ``checkpointSeq``, which another process's
        /// quota may delete meanwhile: a range keyed by the checkpoint would name the gap's seqs, and
        /// a restarted sender settling a wider gap would count these records as never sent.
        var firstUnacknowledgedSeq: UInt64 { ackedThrough < 0 ? batch.seqs.first ?? batch.start.seq : batch.end(after: ackedThrough).seq }

        /// The index in `batch` of the last record covered by the first `n` sendable events: the
        /// batch's last record (expired ones included) when `n` covers them all.
        func batchIndex(coveringSendable n: Int) -> Int {
            n == sendable.count ? batch.count - 1 : sendable[n - 1]
        }
    }

    /// Sends batch after batch until the log is empty, a request fails, or the deadline; the pass
    /// ends with every acknowledgement durable.
    func drain(deadline: Duration?) async -> Pass {
        var pass = await sendBatches(deadline: deadline)
        await dropReadAhead()
        do {
            try await settleAcknowledgement()
        } catch {
            current = nil  // read again from the checkpoint
            pass.outcome = .failed(storageFailure(error, doing: "acknowledging delivered events"))
        }
        return pass
    }

    func sendBatches(deadline: Duration?) async -> Pass {
        var sent = 0
        var sawData = false
        while true {
            if Task.isCancelled || sendsNothingNew { return Pass(sent: sent, outcome: .deadline) }
            var session: Session
            do {
                guard let next = try await nextSession() else {
                    return Pass(sent: sent, outcome: sawData ? .drained : .noData)
                }
                sawData = true
                guard let ready = next else { continue }  // every event expired
                session = ready
            } catch {
                return Pass(sent: sent, outcome: .failed(storageFailure(error, doing: "reading the log")))
            }
            if let pipe = windowTransport, Self.fitsWindow(session) {
                let (delivered, end) = await deliverWindow(first: session, through: pipe, deadline: deadline)
                sent += delivered
                switch end {
                case .drained(let next?), .failed(let next):
                    // A batch the window could not take, or a failure to handle one request at a time.
                    session = next
                case .drained(nil):
                    current = nil
                    continue
                case .outcome(let outcome):
                    current = nil
                    return Pass(sent: sent, outcome: outcome)
                }
            }
            let (delivered, outcome) = await deliver(&session, deadline: deadline)
            sent += delivered
            current = outcome == nil && !session.growNow ? nil : session
            if let outcome { return Pass(sent: sent, outcome: outcome) }
        }
    }

    /// A storage error as the pass's failure, with the `BeaconLogError` as its cause; reported
    /// unless it is the failure reported last.
    func storageFailure(_ error: any Error, doing what: String) -> Failure {
        let failure = Failure(error: error as? DeliveryError ?? DeliveryError(.storage, "\(what) failed: \(error)", cause: error))
        if counters.lastError != failure.error.message { diagnostics(failure.error.message, failure.error) }
        counters.lastError = failure.error.message
        lastFailure = failure.error
        return failure
    }

    /// The batch to deliver: the current one while the checkpoint is where it left it; else the
    /// range an earlier run had in flight (the same events again, for the same idempotency key);
    /// else the next events from the checkpoint. Nil when nothing is pending; `.some(nil)` when
    /// the batch read held only expired events (set aside and acknowledged).
    func nextSession() async throws -> Session?? {
        let log = self.log
        // Where the deferred acknowledgement will put the checkpoint (unless the quota moved it further).
        let readFrom = acknowledging.last.map { max($0.end, log.checkpoint) }
        let checkpoint = readFrom ?? log.checkpoint
        var earlierPasses = 0
        var growing = false
        // A commit that failed on storage (not on the collector) keeps the pass's proof that the
        // collector accepts this client's data: the batch read again does not re-send a probe.
        var provenBeforeBreak = false
        if let session = current {
            provenBeforeBreak = session.broken && session.machine.proven
            current = nil
            // Unless a commit failed, or the quota deleted the batch under us.
            if !session.broken && session.checkpointSeq == checkpoint.seq {
                // A batch too short to prove the collector up (isolated, or holding an event
                // refused without proof) grows when more is pending.
                guard canGrow(session) else {
                    var session = session
                    session.growNow = false
                    current = session
                    return session
                }
                earlierPasses = session.machine.failedPasses
                growing = true
            }
        }
        if !inflightLoaded {
            inflightLoaded = true
            earlierInflight = inflightFile.load()
        }
        // An earlier run's range starting here: the same events again, for the same key. One
        // that began before the checkpoint (cut differently from this run's batches) keeps its
        // part after it: a gap the quota leaves there later counts it as sent, not as never sent.
        earlierInflight = earlierInflight.compactMap { $0.from(checkpoint.seq) }
        if savedInflight?.firstSeq != checkpoint.seq, let range = earlierInflight.first(where: { $0.firstSeq == checkpoint.seq }) {
            savedInflight = range
        }
        var batch: LogBatch
        var payload: RequestBuilder.Payload?
        var earlierSends = earlierPasses, earlierFailures = earlierPasses
        // Not when growing: the range recorded is the short batch that could not prove the collector up.
        if !growing, let range = savedInflight, range.firstSeq == checkpoint.seq {
            batch = try await onIO { try log.read(from: readFrom, maxRecords: range.count, maxBytes: Int.max) }
            // Unless another process's quota deleted the range: then these are later events.
            if batch.firstSeq == range.firstSeq {
                earlierSends = range.sends
                earlierFailures = range.failures
                if range.accepted && batch.count == range.count {
                    // The collector accepted it before a crash of this boot: acknowledged, not sent again.
                    try await acknowledgeAccepted(batch, range)
                    return .some(nil)
                }
            }
        } else {
            let count = configuration.eventsPerRequest(pending: pendingEvents), bytes = configuration.maxBatchBytes
            if let prepared = await takeReadAhead(from: checkpoint.seq, maxRecords: count) {
                (batch, payload) = (prepared.batch, prepared.payload)
            } else {
                batch = try await onIO { try log.read(from: readFrom, maxRecords: count, maxBytes: bytes) }
            }
        }
        if let first = batch.firstSeq, first > checkpoint.seq {
            // The gap must start at the durable checkpoint: the deferred acknowledgements before
            // it first count what was read from a deleted segment and delivered (reader.counters
            // saves the gap as settled, so one settled ahead of them would count those dropped).
            do {
                try await settleAcknowledgement()
            } catch {
                throw storageFailure(error, doing: "acknowledging delivered events").error
            }
            await settleDropped(checkpoint.seq..<first)
        }
        if batch.isEmpty { return nil }
        let sendable = try await setAsideExpired(batch)
        if sendable.isEmpty {
            do {
                try await settleAcknowledgement()
                let end = batch.end
                try await onIO { try log.acknowledge(through: end) }
            } catch {
                throw storageFailure(error, doing: "acknowledging expired events").error
            }
            return .some(nil)
        }
        let machine = DeliveryStateMachine(
            count: sendable.count,
            earlierSends: sendable.count == batch.count ? earlierSends : 0,
            earlierFailures: sendable.count == batch.count ? earlierFailures : 0,
            isolateAfter: configuration.isolateAfterFailures,
            proven: provenBeforeBreak)
        return Session(batch: batch, sendable: sendable, machine: machine, payload: sendable.count == batch.count ? payload : nil, grown: growing)
    }

    /// Whether `session` is too short to prove the collector up (isolated, or holding an event
    /// refused without proof) while more events are pending: the next session reads more.
    func canGrow(_ session: Session) -> Bool {
        let left = UInt64(session.batch.count - 1 - session.ackedThrough)
        let wanted = configuration.eventsPerRequest(pending: pendingEvents)
        return session.machine.awaitsProof && left < UInt64(wanted) && pendingEvents > left
    }

    /// Sets the events older than `maxEventAge` aside (once, even when the batch is read again)
    /// and returns the indices of the others.
    func setAsideExpired(_ batch: LogBatch) async throws -> [Int] {
        var sendable = Array(batch.records.indices)
        let acknowledged = log.checkpoint.seq
        setAside = setAside.filter { $0 >= acknowledged }
        guard let maxAge = configuration.maxEventAge else { return sendable }
        let cutoff = nowMillis - maxAge.nanoseconds / 1_000_000
        var expired: [RejectedFile.Entry] = []
        sendable.removeAll { i in
            guard let t = EventTime.millis(in: batch.records[i]), t < cutoff else { return false }
            expired.append(.init(status: nil, reason: "expired", seq: batch.seqs[i], record: batch.records[i]))
            return true
        }
        // Those set aside by an earlier attempt at this batch are already in rejected.jsonl.
        if !expired.isEmpty { await learnEarlierSetAside() }
        expired.removeAll { setAside.contains($0.seq) }
        guard !expired.isEmpty else { return sendable }
        let file = rejectedFile, now = nowMillis, entries = expired
        do {
            try await onIO { try file.append(entries, nowMillis: now) }
        } catch {
            throw storageFailure(error, doing: "setting aside expired events").error
        }
        counters.expiredEvents += UInt64(expired.count)
        self.setAside.formUnion(expired.map(\.seq))
        return sendable
    }

    /// Adds to ``setAside``, once, the events an earlier process set aside past the checkpoint: one
    /// killed between writing `rejected.jsonl` and acknowledging those events leaves them to be
    /// read again, and they must be acknowledged without a second line each.
    func learnEarlierSetAside() async {
        guard !earlierSetAsideLoaded else { return }
        earlierSetAsideLoaded = true
        let file = rejectedFile, from = log.checkpoint.seq
        let tail = 2 * configuration.maxBatchBytes + (1 << 16)
        if let seqs = try? await onIO({ file.seqs(from: from, tailBytes: tail) }) { setAside.formUnion(seqs) }
    }

    /// Runs blocking work (a read, an acknowledgement): at once on the pass's own thread, else on
    /// the I/O queue.
    func onIO<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        if IOThread.isCurrent { return try body() }
        return try await ioQueue.run(body)
    }

    nonisolated var nowMillis: Int64 { Int64((wallClock().timeIntervalSince1970 * 1000).rounded(.down)) }

    /// Settles `gap`, records another process's quota deleted (and counted as dropped) before this
    /// uploader read them (see ``BeaconLog/settleDropped(_:sent:)``): those `delivery.inflight`
    /// says the collector accepted were delivered; those it says were sent without a recorded
    /// answer (a sender killed or stopped in between) are counted as in doubt, apart from the
    /// dropped, which then were never sent. Reported with their seqs.
    func settleDropped(_ gap: Range<UInt64>) async {
        let sent = (earlierInflight + [savedInflight].compactMap { $0 }).map { (seqs: $0.firstSeq..<($0.firstSeq + UInt64($0.count)), accepted: $0.accepted) }
        let log = self.log
        guard let settlement = try? await onIO({ log.settleDropped(gap, sent: sent) }) else { return }
        let inDoubt = settlement.inDoubtCount
        counters.inDoubtEvents += inDoubt
        guard inDoubt > 0 || settlement.delivered > 0 else { return }
        let seqs = settlement.inDoubt.map { $0.count == 1 ? "\($0.lowerBound)" : "\($0.lowerBound)-\($0.upperBound - 1)" }.joined(separator: ",")
        report(BeaconDiagnostic(kind: .dropped, message: "the log's quota deleted seqs \(gap.lowerBound)-\(gap.upperBound - 1) before this sender reached them: \(settlement.delivered) the collector had accepted (delivered), \(inDoubt) were sent without a recorded answer (the sender was killed or stopped in between), counted as in doubt (dropped[quotaInDoubt], maybe delivered)\(inDoubt > 0 ? ": seqs \(seqs)" : ""), the rest were never sent (dropped[quotaDeleted]); raise the quota or deliver faster", subject: DropReason.quotaInDoubt.name))
    }

    /// Writes `delivery.inflight` when what a restart must read again changed.
    func recordInflight(_ session: Session) async throws {
        let resume = session.machine.resumePoint
        let last = session.batchIndex(coveringSendable: session.machine.committed + resume.count)
        let range = InflightFile.Range(firstSeq: session.firstUnacknowledgedSeq, count: last - session.ackedThrough, sends: max(1, resume.sends), failures: session.machine.resumeFailures)
        guard range != savedInflight else { return }
        // Ranges an earlier run sent beyond this one stay listed until they are reached (their
        // part beyond it, when this batch was cut across one): a crash before then must not let
        // the next run cut them differently, nor count what they say was accepted as never sent.
        let end = range.firstSeq + UInt64(range.count)
        var ranges = acknowledging.flatMap(\.ranges)
            + [range] + earlierInflight.compactMap { $0.from(end) }
        while InflightFile.lineCount(ranges) > InflightFile.capacity { ranges.removeLast() }
        // One pwrite into the page cache, on this actor: a hop to the I/O queue and back would
        // cost more than the write, between an answer and the next request.
        try inflightFile.save(ranges)
        savedInflight = range
    }
}
