import BeaconHTTP
import BeaconLog
import Foundation

/// A window of requests in flight: while batches go through without failure, up to W of them
/// are outstanding on the one keep-alive connection (HTTP/1.1 pipelining through a
/// ``PipeliningTransport``). The collector reads pipelined requests in order, so with no failure
/// it receives the log's order. W is `RequestWindow`'s (additive increase, multiplicative
/// decrease, at most ``DeliveryConfiguration/maxRequestsInFlight``).
///
/// The rules that keep the log's guarantees:
/// - The checkpoint advances only over a contiguous prefix of accepted batches: answers come in
///   order, and each 2xx acknowledges its batch (deferred, grouped) as the one-at-a-time path does.
/// - `delivery.inflight` lists every batch of the window as it was cut, so a kill -9 re-sends at
///   most the window, each batch with its key.
/// - The first answer that is not a 2xx (or no answer) ends the window: nothing more is written,
///   the answers of the requests behind it are read (a 2xx marks its batch accepted, to be
///   acknowledged without being sent again once the checkpoint reaches it), and the failed batch
///   goes on in the one-request path (backoff, 413 split, 400 bisection, isolation, pause),
///   which runs until the failure is handled; the window grows again from the next fresh batch.
///   So after a failure, a request's events may arrive after those of at most W − 1 requests sent
///   behind it.
/// - A collector that ends the connection with requests unanswered soon after it opened (HTTP/1.0,
///   `Connection: close`, a close after fewer answers than twice the window), three connections
///   in a row, mishandles pipelining or allows too few requests per connection for it: delivery
///   falls back to one request at a time for it. The requests not answered are sent again as
///   they were cut, each time.
extension Uploader {
    /// A request of the window, written and not answered yet.
    struct Outstanding: Sendable {
        var session: Session
        /// Its range in `delivery.inflight`.
        var range: InflightFile.Range
        /// When it was written, and its timeout.
        var sentAt: Duration
        var timeout: Duration
        var bytes: Int
    }

    /// How the window ended.
    enum WindowEnd: Sendable {
        /// No batch left to send (the log is drained, or the next batch needs the one-request path).
        case drained(next: Session?)
        /// A request failed: its batch goes on in the one-request path.
        case failed(Session)
        /// The pass ends: cancelled or out of time (`.deadline`), or storage failed.
        case outcome(PassOutcome)
    }

    /// The transport, when the window may hold more than one request for it.
    var windowTransport: (any PipeliningTransport)? {
        guard configuration.maxRequestsInFlight > 1, window.pipeliningRefused == nil, configuration.maxEventAge == nil else { return nil }
        return transport as? any PipeliningTransport
    }

    /// Whether `session` may open or join a window: a whole batch that no failure is being
    /// handled for (never tried, or only re-sent after a request that got no answer).
    static func fitsWindow(_ session: Session) -> Bool {
        let machine = session.machine
        return machine.committed == 0 && machine.failedPasses == 0 && !machine.awaitsProof && !session.broken
            && machine.segments.count == 1 && machine.segments[0].state == .untried && session.ackedThrough < 0
    }

    /// Sends `first` and the batches after it with up to W requests in flight, until the log is
    /// drained, a request fails, or the deadline. Returns the events delivered and how it ended.
    func deliverWindow(first: Session, through pipe: any PipeliningTransport, deadline: Duration?) async -> (sent: Int, end: WindowEnd) {
        var sent = 0
        var outstanding: [Outstanding] = []
        var next: Session? = first
        /// Answers read on the current connection.
        var answeredOnConnection = 0
        var exhausted = false
        /// Where the batch after the last one written starts.
        var readFrom = first.batch.end
        while true {
            // Fill the window.
            while window.canSend && !exhausted && !Task.isCancelled && !sendsNothingNew {
                if next == nil {
                    next = (try? await windowSession(from: readFrom)) ?? nil
                    if next == nil { exhausted = true; break }
                }
                guard var session = next, Self.fitsWindow(session) else { exhausted = true; break }
                guard let timeout = DeliveryTiming.requestTimeout(now: time.now(), deadline: deadline, requestTimeout: configuration.requestTimeout, lastRequestDuration: lastRequestDuration) else {
                    exhausted = true
                    break
                }
                guard case .send(let range, let retry) = session.machine.nextAction(), range == 0..<session.sendable.count else {
                    preconditionFailure("Invalid state: a fresh batch's first action is to send it whole")
                }
                let inflight = InflightFile.Range(firstSeq: session.firstUnacknowledgedSeq, count: session.batch.count, sends: retry + 1, failures: 0)
                do {
                    try saveWindow(outstanding.map(\.range) + [inflight])
                } catch {
                    session.machine.abandon(sent: false)
                    _ = storageFailure(error, doing: "recording the batches in flight")
                    next = session
                    exhausted = true
                    break
                }
                if retry > 0 { counters.retries += 1 }
                let request = requests.request(records: session.batch.records, seqs: session.batch.seqs, crcs: session.batch.crcs, payload: session.payload, sentAt: nowMillis, retry: retry, timeout: timeout)
                observeSending(events: session.batch.count)
                let started = time.now()
                do {
                    try await pipe.writePipelined(request)
                } catch {
                    // Not written (or not whole): the connection is gone with what it held.
                    let cause = transportError(error)
                    observeAnswer(.failure(cause), events: session.batch.count, elapsed: time.now() - started)
                    reportInvalid(window.sent())
                    reportInvalid(window.forget(1))
                    session.machine.abandon(sent: true)
                    if cause.code == .cancelled || Task.isCancelled {
                        leaveUnanswered(outstanding, plus: session)
                        reportInvalid(window.forget(outstanding.count))
                        return (sent, .outcome(.deadline))
                    }
                    if outstanding.isEmpty {
                        // Nothing else in flight: the one-request path sends it (and reports).
                        return (sent, .drained(next: session))
                    }
                    leaveUnanswered(outstanding.dropFirst(), plus: session)
                    reportInvalid(window.forget(outstanding.count - 1))
                    pipe.dropPipeline()
                    var front = outstanding[0].session
                    front.machine.received(.retry, DeliveryStateMachine.Answer(status: nil, detail: cause.message, cause: cause))
                    counted(failure: cause.message)
                    reportInvalid(window.answered(.other, now: time.now()))
                    return (sent, .failed(front))
                }
                reportInvalid(window.sent())
                readFrom = session.batch.end
                outstanding.append(Outstanding(session: session, range: inflight, sentAt: started, timeout: timeout, bytes: request.content.count))
                next = nil
            }
            // The checkpoint write (an fdatasync holding the log's reader lock) starts once the
            // window is full, while its answers are awaited: not between the reads that fill it.
            startAcknowledgement()
            guard !outstanding.isEmpty else { return (sent, Task.isCancelled || sendsNothingNew ? .outcome(.deadline) : .drained(next: next)) }

            // The oldest answer.
            var front = outstanding.removeFirst()
            let waited = time.now() - front.sentAt
            let result: Result<(response: TransportResponse, keepsAlive: Bool), TransportError>
            do {
                result = .success(try await pipe.readPipelined(timeout: max(.milliseconds(1), front.timeout - waited)))
            } catch {
                result = .failure(transportError(error))
            }
            let elapsed = time.now() - front.sentAt
            observeAnswer(result.map(\.response), events: front.session.batch.count, elapsed: elapsed)
            switch result {
            case .failure(let cause) where cause.code == .cancelled || Task.isCancelled
                || (cause.code == .timeout && front.timeout < configuration.requestTimeout && deadline.map { time.now() >= $0 - .milliseconds(1) } == true):
                // Cancelled, or cut off by the deadline (not refused by the collector).
                pipe.dropPipeline()
                front.session.machine.abandon(sent: true)
                leaveUnanswered([front] + outstanding)
                reportInvalid(window.forget(1 + outstanding.count))
                return (sent, .outcome(.deadline))
            case .failure(let cause):
                pipe.dropPipeline()
                let scrubbed = TransportError(cause.code, credentials.scrub(cause.message))
                if cause.code == .network && !outstanding.isEmpty && answeredOnConnection > 0 && answeredOnConnection < 2 * window.limit {
                    // Closed with requests unanswered, soon after it opened: no failure of these
                    // events (sent again as they were cut); the third time in a row, one request
                    // at a time for this collector from then on.
                    reportInvalid(window.forget(1 + outstanding.count))
                    endedEarly(after: answeredOnConnection, "the connection was closed after \(answeredOnConnection) answers with \(1 + outstanding.count) requests unanswered")
                    front.session.machine.abandon(sent: true)
                    leaveUnanswered(outstanding)
                    return (sent, .drained(next: front.session))
                }
                reportInvalid(window.answered(cause.code == .timeout ? .pushedBack : .other, now: time.now()))
                reportInvalid(window.forget(outstanding.count))
                counted(failure: scrubbed.message)
                leaveUnanswered(outstanding)
                front.session.machine.received(cause.code == .tls ? .pause : .retry, DeliveryStateMachine.Answer(status: nil, detail: scrubbed.message, cause: scrubbed))
                return (sent, .failed(front.session))
            case .success(let (response, keepsAlive)):
                answeredOnConnection += 1
                noteAnswer(response)
                let verdict = AnswerAction.of(response, classifier: configuration.classifyAnswer)
                reportInvalid(window.answered(verdict == .acknowledge ? .accepted(rtt: elapsed) : verdict == .retry ? .pushedBack : .other, now: time.now()))
                if answeredOnConnection == 2 * window.limit { window.connectionServed() }
                if !keepsAlive {
                    defer { answeredOnConnection = 0 }
                    if !outstanding.isEmpty {
                        // The connection ended with requests behind this answer.
                        reportInvalid(window.forget(outstanding.count))
                        endedEarly(after: answeredOnConnection, "it answered \(response.status) with Connection: close (or HTTP/1.0) with \(outstanding.count) requests behind")
                        leaveUnanswered(outstanding)
                        outstanding = []
                        exhausted = true
                    }
                }
                guard verdict == .acknowledge else {
                    let detail = credentials.excerpt(response.body, limit: AnswerExcerpt.rejectedLimit)
                    var answer = DeliveryStateMachine.Answer(status: response.status, detail: detail)
                    if verdict == .retry || verdict == .pause {
                        answer.retryAfter = response.headers["Retry-After"].flatMap { HTTPDate.retryAfter($0, nowMillis: nowMillis) }
                    }
                    if verdict == .split || verdict == .reject { counters.splits += 1 }
                    if verdict == .retry || verdict == .pause { counted(failure: "HTTP \(response.status)") }
                    front.session.machine.received(verdict, answer)
                    // Nothing more goes out; the answers behind it are read, then the failure is
                    // handled one request at a time.
                    sent += await drain(outstanding, through: pipe)
                    return (sent, .failed(front.session))
                }
                sent += front.session.batch.count
                counters.sentRequests += 1
                counters.sentBytes += UInt64(front.bytes)
                lastRequestDuration = elapsed
                counted(delivered: front.session.batch.count)
                front.session.machine.received(.acknowledge)
                guard case .commit(through: front.session.sendable.count, setAside: []) = front.session.machine.nextAction() else {
                    preconditionFailure("Invalid state: an accepted whole batch commits whole")
                }
                do {
                    try await acknowledgeWindowed(front)
                } catch {
                    // The batches behind it were sent: their answers are read, and the checkpoint
                    // is read again from the durable one.
                    sent += await drain(outstanding, through: pipe)
                    return (sent, .outcome(.failed(storageFailure(error, doing: "acknowledging delivered events"))))
                }
            }
        }
    }

    /// The batch after `position`, read for the window: nil at the log's end, or when the quota
    /// left a gap there (or a record there was passed over), for the one-request path.
    func windowSession(from position: LogPosition) async throws -> Session? {
        let log = self.log
        let count = configuration.eventsPerRequest(pending: pendingEvents), bytes = configuration.maxBatchBytes
        // A range an earlier run (or an earlier window) sent from here: the same events again.
        if let range = earlierInflight.first(where: { $0.firstSeq == position.seq }) {
            guard !range.accepted else { return nil }  // the one-request path acknowledges it
            let batch = try await onIO { try log.read(from: position, maxRecords: range.count, maxBytes: Int.max) }
            guard batch.count == range.count, batch.firstSeq == position.seq else { return nil }
            let machine = DeliveryStateMachine(count: batch.count, earlierSends: range.sends, earlierFailures: range.failures, isolateAfter: configuration.isolateAfterFailures)
            return Session(batch: batch, sendable: Array(batch.records.indices), machine: machine)
        }
        let batch = try await onIO { try log.read(from: position, maxRecords: count, maxBytes: bytes) }
        // After a gap the quota left, the one-request path settles it (``nextSession()``).
        if batch.isEmpty || batch.firstSeq != position.seq { return nil }
        let machine = DeliveryStateMachine(count: batch.count, isolateAfter: configuration.isolateAfterFailures)
        return Session(batch: batch, sendable: Array(batch.records.indices), machine: machine)
    }

    /// Writes `delivery.inflight`: the acknowledgements outstanding, the window's requests, then
    /// the ranges an earlier run sent beyond them.
    func saveWindow(_ window: [InflightFile.Range]) throws {
        guard let last = window.last else { return }
        let end = last.firstSeq + UInt64(last.count)
        var ranges = acknowledging.flatMap(\.ranges) + window + earlierInflight.compactMap { $0.from(end) }
        while InflightFile.lineCount(ranges) > InflightFile.capacity { ranges.removeLast() }
        try inflightFile.save(ranges)
        savedInflight = nil
    }

    /// The acknowledgement of a whole batch the collector accepted in the window: deferred and
    /// grouped while more waits, else made durable now.
    func acknowledgeWindowed(_ done: Outstanding) async throws {
        let accepted = InflightFile.Range(firstSeq: done.range.firstSeq, count: done.range.count, sends: done.range.sends, failures: 0)
        if canOverlap(after: done.session) {
            try await settleAcknowledgement(keeping: roomForAcknowledgement)
            deferAcknowledgement(end: done.session.batch.end, range: accepted)
            startAcknowledgement()
        } else {
            try await settleAcknowledgement()
            let log = self.log, end = done.session.batch.end
            try await onIO { try log.acknowledge(through: end) }
        }
        let end = done.session.batch.end.seq
        earlierInflight = earlierInflight.compactMap { $0.from(end) }
    }

    /// Reads the answers to `behind`, the requests written after one that failed: a 2xx marks
    /// its batch accepted (acknowledged without being sent again when the checkpoint reaches it),
    /// anything else leaves it to be sent again as it was cut. Returns the events accepted.
    func drain(_ behind: [Outstanding], through pipe: any PipeliningTransport) async -> Int {
        var delivered = 0
        var rest = behind[...]
        while let o = rest.first {
            let waited = time.now() - o.sentAt
            guard let (response, keepsAlive) = try? await pipe.readPipelined(timeout: max(.milliseconds(1), o.timeout - waited)) else {
                pipe.dropPipeline()
                break
            }
            rest.removeFirst()
            reportInvalid(window.answered(.other, now: time.now()))
            noteAnswer(response)
            let accepted = AnswerAction.of(response, classifier: configuration.classifyAnswer) == .acknowledge
            var range = o.range
            range.accepted = accepted
            if accepted {
                counters.sentRequests += 1
                counters.sentBytes += UInt64(o.bytes)
                counted(delivered: o.session.batch.count)
                delivered += o.session.batch.count
            }
            remember(range)
            if !keepsAlive { pipe.dropPipeline(); break }
        }
        reportInvalid(window.forget(rest.count))
        leaveUnanswered(Array(rest))
        return delivered
    }

    /// The requests of the window that got no answer: sent again later, as they were cut.
    func leaveUnanswered<S: Sequence<Outstanding>>(_ requests: S, plus session: Session? = nil) {
        for o in requests { remember(o.range) }
        if let session {
            remember(InflightFile.Range(firstSeq: session.firstUnacknowledgedSeq, count: session.batch.count, sends: session.machine.segments.first?.sends ?? 1, failures: 0))
        }
        try? saveWindow([])
    }

    /// Keeps `range` among those a later pass (or run) sends as they were cut.
    func remember(_ range: InflightFile.Range) {
        earlierInflight.removeAll { $0.firstSeq == range.firstSeq }
        earlierInflight.append(range)
        earlierInflight.sort { $0.firstSeq < $1.firstSeq }
    }

    /// A connection ended with requests unanswered: the third time in a row before it served twice
    /// the window, one request at a time for this collector from then on, said once.
    func endedEarly(after answered: Int, _ why: String) {
        guard window.connectionEnded(after: answered, why) else { return }
        report(BeaconDiagnostic(kind: .delivery, message: "\(RedactedURL(configuration.url)) does not take pipelined requests (\(why)): one request at a time from now on; the requests it did not answer are sent again", subject: "pipelining", severity: .notice))
    }

    /// What every answer tells besides its verdict: the status and the collector's clock.
    func noteAnswer(_ response: TransportResponse) {
        counters.lastStatus = response.status
        if let date = response.headers["Date"], let seconds = collectorSeconds(date) {
            counters.clockSkew = .milliseconds(seconds * 1000 + 500 - nowMillis)
        }
    }

    func transportError(_ error: any Error) -> TransportError {
        if let error = error as? TransportError { return error }
        if error is CancellationError { return TransportError(.cancelled, "the request was cancelled") }
        return TransportError(.network, "\(error)")
    }
}
