/// Flush and shutdown: passes run in the caller's task, until drained, a failure or a deadline.
extension Uploader {
    /// Sends every pending event now, retrying transient failures with backoff until the deadline.
    ///
    /// When the log is opened `.readWrite` in this process, the records still in its write buffer
    /// are written and fsynced first (`sync()`), so the flush covers everything appended before it.
    ///
    /// A flush does not wait for a pending backoff (it tries at once), but it honours a
    /// collector's `Retry-After`: if that ends after the deadline the flush fails at once. After a
    /// transient failure (5xx, 408, 429, timeout, network error) it waits the backoff and tries
    /// again, as long as a request may still start before the deadline. No request starts unless
    /// the time left exceeds what the last successful request took, and none runs past the
    /// deadline (its timeout is cut to the time left); when the deadline ends the retries with
    /// nothing delivered since the failure, the result is that failure. A configuration problem
    /// (401, 403, 404, …) or a storage error ends the flush at once.
    ///
    /// The flush runs in the caller's task, after a background pass that runs; concurrent callers
    /// share it and get the same result (cancelling the caller that runs it cuts it short for
    /// all). After ``shutdown(timeout:)`` or ``stop()`` it fails with ``DeliveryError/Code/stopped``.
    ///
    /// - Parameter timeout: how long from now the flush may take; nil for one pass that stops at
    ///   the first failure (each request still has `requestTimeout`).
    public func flush(timeout: Duration? = nil) async -> FlushResult {
        let target = timeout.map { time.now() + $0 }
        var sentBefore = 0
        switch scheduling.withLock({ $0.machine.flushRequested() }) {
        case .refuse:
            return reportingLosses(stoppedResult())
        case .join:
            sharedFlushJoins += 1
            return reportingLosses(await withCheckedContinuation { flushJoiners.append($0) })
        case .waitForPass:
            lastLoopPassSent = 0
            let run = await withCheckedContinuation { (continuation: CheckedContinuation<Bool, Never>) in
                let ready = scheduling.withLock { s -> Bool? in
                    switch s.machine.state {
                    case .sending(flushQueued: true):
                        s.queuedFlush = continuation
                        return nil
                    case .flushing:
                        return true  // the pass ended and this flush's turn came
                    default:
                        return false  // shut down or stopped meanwhile
                    }
                }
                if let ready { continuation.resume(returning: ready) }
            }
            guard run else {
                let result = stoppedResult()
                resumeFlushJoiners(result)
                return reportingLosses(result)
            }
            // What the pass it waited for delivered counts as this flush's.
            sentBefore = lastLoopPassSent
        case .run:
            break
        }
        let result = await cancellable { [sentBefore] in await self.runFlush(until: target, sentBefore: sentBefore) }
        perform(scheduling.withLock { $0.machine.flushEnded() })
        resumeFlushJoiners(result)
        return reportingLosses(result)
    }

    func resumeFlushJoiners(_ result: FlushResult) {
        let joiners = flushJoiners
        flushJoiners = []
        for joiner in joiners { joiner.resume(returning: result) }
    }

    func stoppedResult() -> FlushResult {
        let pending = pendingEvents
        return FlushResult(sent: 0, remaining: pending, outcome: .failed(DeliveryError(.stopped, "the uploader is shut down; start a new one to deliver the \(pending) pending events")))
    }

    /// Stops the background passes, then delivers what is pending until drained or the deadline,
    /// retrying transient failures with backoff as ``flush(timeout:)`` does. A pass or flush
    /// that runs is waited for and, if it still runs at the deadline, cancelled (its events stay
    /// pending and are sent again, with the same idempotency key, after the next start). The loop
    /// ``start()`` runs ends before this returns. Later flushes fail; concurrent and later
    /// shutdowns return the same report.
    ///
    /// - Parameter timeout: how long from now shutdown may take; nil for one pass that stops at
    ///   the first failure.
    public func shutdown(timeout: Duration? = nil) async -> FlushResult {
        await shutdown(timeout: timeout) { $0.shutdownRequested() }
    }

    /// ``shutdown(timeout:)`` as `request` asks the scheduler for it (with its drain, or
    /// ``finishRequestsInFlight(within:)``'s without).
    private func shutdown(timeout: Duration?, request: (inout UploaderScheduler) -> UploaderScheduler.ShutdownAction) async -> FlushResult {
        let target = timeout.map { time.now() + $0 }
        let (action, wakeup, queued, probe) = scheduling.withLock { s in
            let action = request(&s.machine)
            let queued = action == .waitThenDrain(refuseQueuedFlush: true) ? s.queuedFlush.take() : nil
            return (action, s.wakeup, queued, s.probe)
        }
        // A probe of the loop's backoff ends now: the loop exits at its next step.
        probe?.cancel()
        wakeup?.signal()
        queued?.resume(returning: false)
        var sentBefore = 0
        switch action {
        case .report:
            if let shutdownResult { return shutdownResult }
            return reportingLosses(pendingEvents == 0 ? FlushResult(sent: 0, remaining: 0, outcome: .noData) : stoppedResult())
        case .join:
            return await withCheckedContinuation { shutdownJoiners.append($0) }
        case .drain:
            break
        case .waitThenDrain:
            lastLoopPassSent = 0
            await waitForRunning(cancelAt: target)
            sentBefore = lastLoopPassSent
        }
        var result: FlushResult
        if let target, time.now() >= target {
            result = FlushResult(sent: sentBefore, remaining: pendingEvents, outcome: .deadlineReached)
        } else if scheduling.withLock({ $0.machine.skipsDrain }) {
            result = FlushResult(sent: sentBefore, remaining: pendingEvents, outcome: pendingEvents == 0 ? .drained : .deadlineReached)
        } else {
            result = await cancellable { [sentBefore] in await self.runFlush(until: target, sentBefore: sentBefore) }
        }
        let loop = scheduling.withLock { s in
            s.machine.shutdownEnded()
            return s.backgroundLoop.take()
        }
        await loop?.value
        result = reportingLosses(result)
        shutdownResult = result
        let joiners = shutdownJoiners
        shutdownJoiners = []
        for joiner in joiners { joiner.resume(returning: result) }
        return result
    }

    /// Stops the way a signalled sidecar (`beacon send`) stops: from now on no request is written,
    /// the answers to those already written are awaited until `grace` from now, and each 2xx
    /// among them is acknowledged (durably) before this returns. A request still unanswered then
    /// is cancelled: its events stay pending and go next time with the same idempotency key
    /// (at-least-once). So a clean stop leaves pending nothing the collector accepted, and the
    /// next start sends no accepted batch twice. Otherwise it is ``shutdown(timeout:)`` without
    /// the final drain: later flushes fail, concurrent shutdowns get the same report.
    ///
    /// - Parameter grace: how long from now the answers may take; `.zero` cancels at once.
    package func finishRequestsInFlight(within grace: Duration) async -> FlushResult {
        await shutdown(timeout: grace) { $0.finishRequested() }
    }

    /// Whether no request may be written any more (``finishRequestsInFlight(within:)``).
    nonisolated var sendsNothingNew: Bool { scheduling.withLock { $0.machine.sendsNothingNew } }

    /// Waits until the pass or flush a shutdown found running has ended, cancelling it at `target`.
    func waitForRunning(cancelAt target: Duration?) async {
        await withTaskGroup(of: Void.self) { group in
            if let target {
                group.addTask { [time] in
                    guard (try? await time.sleepUntil(target)) != nil else { return }
                    self.cancelRunning()
                }
            }
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                // Looked at and registered under the scheduler's lock, where the pass's end finds it.
                let drainingAlready = scheduling.withLock { s -> Bool in
                    if s.machine.state == .shuttingDown(.draining) { return true }
                    s.shutdownWaiter = continuation
                    return false
                }
                if drainingAlready { continuation.resume() }
            }
            group.cancelAll()
        }
    }

    /// Passes until drained, a failure that is not retried, or `target`; `sentBefore` events
    /// already count as sent.
    func runFlush(until target: Duration?, sentBefore: Int = 0) async -> FlushResult {
        let retryAfterUntil = scheduling.withLock { $0.machine.retryAfterUntil }
        if retryAfterUntil > time.now() {
            if let target, retryAfterUntil > target {
                let error = lastFailure ?? DeliveryError(.transient, "the collector asked to retry later (Retry-After)")
                return FlushResult(sent: sentBefore, remaining: pendingEvents, outcome: .failed(error))
            }
            try? await time.sleepUntil(retryAfterUntil)
        }
        // Records still in the writer's buffer become readable (and durable) first.
        let log = self.log
        if log.configuration.access == .readWrite {
            try? await onIO { try log.sync() }
        }
        if Task.isCancelled {
            return FlushResult(sent: sentBefore, remaining: pendingEvents, outcome: .deadlineReached)
        }
        var sent = sentBefore
        // The failure being retried: a deadline that ends its retries, with nothing delivered
        // since, reports it (why the events are still pending) rather than the deadline.
        var retrying: DeliveryError?
        while true {
            let pass = await drain(deadline: target)
            let end = passEnd(pass)
            scheduling.withLock { $0.machine.flushPassEnded(end) }
            sent += pass.sent
            if pass.sent > 0 { retrying = nil }
            switch pass.outcome {
            case .drained: return FlushResult(sent: sent, remaining: pendingEvents, outcome: .drained)
            case .noData: return FlushResult(sent: sent, remaining: pendingEvents, outcome: sent > 0 ? .drained : .noData)
            case .deadline: return FlushResult(sent: sent, remaining: pendingEvents, outcome: retrying.map { .failed($0) } ?? .deadlineReached)
            case .failed(let failure):
                retrying = failure.error
                // Transient failures are retried after the backoff while a request may still start.
                let notBefore = scheduling.withLock { $0.machine.failure?.retryAt ?? .zero }
                guard failure.error.code == .transient, !Task.isCancelled,
                      let retryAt = DeliveryTiming.flushRetry(at: notBefore, deadline: target, requestTimeout: configuration.requestTimeout, lastRequestDuration: lastRequestDuration)
                else {
                    return FlushResult(sent: sent, remaining: pendingEvents, outcome: .failed(failure.error))
                }
                do { try await time.sleepUntil(retryAt) } catch {
                    return FlushResult(sent: sent, remaining: pendingEvents, outcome: .failed(failure.error))
                }
            }
        }
    }

}
