import BeaconHTTP
import BeaconLog
import Foundation

/// One batch delivered one request at a time: the state machine's actions (send, split, set
/// aside, commit) performed until the batch is committed or the pass ends. The window
/// (Uploader+Window.swift) pipelines instead where it can.
extension Uploader {
    /// Performs the state machine's actions for one batch until it is committed (nil) or the pass
    /// ends. Returns the events the collector accepted.
    func deliver(_ session: inout Session, deadline: Duration?) async -> (Int, PassOutcome?) {
        let log = self.log
        var sent = 0
        while true {
            if Task.isCancelled { return (sent, .deadline) }
            let action = session.machine.nextAction()
            switch action {
            case .finished:
                return (sent, nil)

            case .commit(let through, let setAside):
                let last = session.batchIndex(coveringSendable: through)
                let end = last == session.batch.count - 1 ? session.batch.end : session.batch.end(after: last)
                if !setAside.isEmpty { await learnEarlierSetAside() }
                let asides = setAside.filter { !self.setAside.contains(session.batch.seqs[session.sendable[$0.index]]) }
                let entries = asides.map { rejectedEntry($0, session) }
                do {
                    let overlap = entries.isEmpty && through == session.sendable.count && canOverlap(after: session)
                    try await settleAcknowledgement(keeping: overlap ? roomForAcknowledgement : 0)
                    if overlap {
                        // The rest of the batch, with more events waiting: made durable while the
                        // next requests go out.
                        deferAcknowledgement(end: end, range: savedInflight)
                        session.ackedThrough = last
                        continue
                    }
                    if !entries.isEmpty {
                        let file = rejectedFile, now = nowMillis
                        try await onIO { try file.append(entries, nowMillis: now) }
                        self.setAside.formUnion(entries.map(\.seq))
                        counters.rejectedEvents += UInt64(entries.count)
                        let seqs = entries.map { String($0.seq) }.joined(separator: ", ")
                        let message = "set aside \(entries.count) event\(entries.count == 1 ? "" : "s") (seq \(seqs)) in \(rejectedFile.path): \(entries[0].reason)"
                        diagnostics(message, Self.error(.rejected, message, answer: asides[0].answer))
                    }
                    try await onIO { try log.acknowledge(through: end) }
                } catch {
                    session.broken = true
                    return (sent, .failed(storageFailure(error, doing: setAside.isEmpty ? "acknowledging delivered events" : "setting aside a refused event")))
                }
                session.ackedThrough = last

            case .stop(.retry(let answer)):
                // The failed pass counts towards isolating the batch after a restart too. Best
                // effort: without it a restart only starts that count again.
                try? await recordInflight(session)
                let count = session.sendable.count - session.machine.committed
                let message: String
                if let status = answer.status {
                    message = "\(RedactedURL(configuration.url)) answered \(status)\(Self.quote(answer.detail)) for \(count) events; they stay stored and are retried\(answer.retryAfter.map { " after \($0) (Retry-After)" } ?? " with backoff")"
                } else {
                    message = "sending \(count) events to \(RedactedURL(configuration.url)) failed: \(answer.detail); they stay stored and are retried"
                }
                let error = Self.error(.transient, message, answer: answer)
                observePause(answer.status.map { "HTTP \($0)" } ?? answer.detail, error: error)
                return (sent, .failed(fail(error, retryAfter: answer.retryAfter)))

            case .stop(.refusedEverything) where !session.grown && canGrow(session):
                // Every request refused, but the batch was too short to tell the client from its
                // data (one event, resumed alone from delivery.inflight after a restart): the pass
                // goes on with a longer batch, whose other events can prove the collector up.
                session.growNow = true
                return (sent, nil)

            case .stop(.pause(let answer)), .stop(.refusedEverything(let answer)):
                guard let status = answer.status else {
                    // No answer: TLS refused the collector (the detail names the check and host).
                    let message = "\(answer.detail); delivery is paused with backoff and every event is kept (\(pendingOnDisk) pending). Fix the TLS configuration (CA, client certificate) or the collector's certificate"
                    let error = Self.error(.configuration, message, answer: answer)
                    if counters.paused != "TLS" { diagnostics(message, error) }
                    observePause("TLS: \(answer.detail)", error: error, announced: counters.paused != "TLS")
                    counters.paused = "TLS"
                    return (sent, .failed(fail(error, retryAfter: nil)))
                }
                let message = action == .stop(.refusedEverything(answer))
                    ? "\(RedactedURL(configuration.url)) answered \(status)\(Self.quote(answer.detail)) to every request, down to single events, and accepted none: the collector refuses this client, not its data (a client certificate it requires? http:// to an https port? a proxy?); no event was set aside, delivery is paused with backoff and every event is kept (\(pendingOnDisk) pending). Fix the collector URL, TLS or proxy settings"
                    : "\(RedactedURL(configuration.url)) answered \(status)\(Self.hint(status))\(Self.quote(answer.detail)); delivery is paused with backoff and every event is kept (\(pendingOnDisk) pending). Fix the collector URL or credentials"
                let error = Self.error(.configuration, message, answer: answer)
                let announce = counters.paused == nil || counters.lastStatus != status
                if announce { diagnostics(message, error) }
                observePause("HTTP \(status)", error: error, announced: announce)
                counters.paused = "HTTP \(status)"
                return (sent, .failed(fail(error, retryAfter: answer.retryAfter)))

            case .send(let range, let retry):
                // Stopping: the answers to requests written are awaited, no new one is written.
                guard !sendsNothingNew, let timeout = DeliveryTiming.requestTimeout(now: time.now(), deadline: deadline, requestTimeout: configuration.requestTimeout, lastRequestDuration: lastRequestDuration) else {
                    session.machine.abandon(sent: false)
                    return (sent, .deadline)
                }
                do {
                    try await recordInflight(session)
                } catch {
                    session.machine.abandon(sent: false)
                    return (sent, .failed(storageFailure(error, doing: "recording the batch in flight")))
                }
                // The whole batch (the usual case) goes as read: no copy of its records per request.
                let whole = range.count == session.batch.count
                let indices = session.sendable[range]
                let records = whole ? session.batch.records : indices.map { session.batch.records[$0] }
                let seqs = whole ? session.batch.seqs : indices.map { session.batch.seqs[$0] }
                let crcs = whole || session.batch.crcs.isEmpty ? session.batch.crcs : indices.map { session.batch.crcs[$0] }
                if range.upperBound == session.sendable.count { startReadAhead(after: session) }
                startAcknowledgement()
                let (result, bytes, elapsed) = await send(records: records, seqs: seqs, crcs: crcs, payload: whole ? session.payload : nil, retry: retry, timeout: timeout)
                switch result {
                case .failure(let error) where error.code == .cancelled || Task.isCancelled:
                    session.machine.abandon(sent: true)
                    return (sent, .deadline)
                case .failure(let error) where error.code == .timeout && timeout < configuration.requestTimeout && deadline.map { time.now() >= $0 - .milliseconds(1) } == true:
                    // Cut off by the deadline, not refused by the collector.
                    session.machine.abandon(sent: true)
                    return (sent, .deadline)
                case .failure(let error):
                    let cause = TransportError(error.code, credentials.scrub(error.message))
                    counted(failure: cause.message)
                    // TLS refused (a certificate failed verification...): configuration, like a 401.
                    session.machine.received(error.code == .tls ? .pause : .retry, DeliveryStateMachine.Answer(status: nil, detail: cause.message, cause: cause))
                case .success(let response):
                    let verdict = AnswerAction.of(response, classifier: configuration.classifyAnswer)
                    // The body is read only when the answer may be reported.
                    let detail = verdict == .acknowledge ? "" : credentials.excerpt(response.body, limit: AnswerExcerpt.rejectedLimit)
                    var answer = DeliveryStateMachine.Answer(status: response.status, detail: detail)
                    if verdict == .retry || verdict == .pause {
                        answer.retryAfter = response.headers["Retry-After"].flatMap { HTTPDate.retryAfter($0, nowMillis: nowMillis) }
                    }
                    switch verdict {
                    case .acknowledge:
                        sent += records.count
                        counters.sentRequests += 1
                        counters.sentBytes += UInt64(bytes)
                        lastRequestDuration = elapsed
                        counted(delivered: records.count)
                    case .split, .reject:
                        if records.count > 1 { counters.splits += 1 }
                    case .retry:
                        counted(failure: "HTTP \(response.status)")
                    case .pause:
                        counted(failure: "HTTP \(response.status)")
                    }
                    session.machine.received(verdict, answer)
                }
            }
        }
    }
}
