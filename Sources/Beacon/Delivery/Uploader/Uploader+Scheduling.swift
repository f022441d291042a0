import Synchronization

/// The delivery loop and the triggers: ``UploaderScheduler``'s inputs, and its actions carried out.
extension Uploader {
    /// Delivers in the calling task until it is cancelled, then shuts the uploader down: what is
    /// pending is delivered within `shutdownGrace` (``shutdown(timeout:)``), and it returns once
    /// the uploader is shut down. The same meaning as ``Beacon/run()``'s, for a service group.
    ///
    /// Until then it delivers in the background: the first pass at once (events left by earlier
    /// runs), then one whenever `flushBulkSize` events are pending, every `flushInterval`, and
    /// after a failed pass's backoff. While idle it sleeps (one sleep on the uploader's clock).
    /// It also returns, without a shutdown, when the uploader is shut down or stopped another
    /// way, or when a later `run()` takes over (the earlier one returns after its pass).
    ///
    /// ```swift
    /// await withDiscardingTaskGroup { group in
    ///     group.addTask { await uploader.run() }
    ///     // ... cancel the group to stop: what is pending is delivered within 2 s
    /// }
    /// ```
    ///
    /// - Parameter shutdownGrace: how long the shutdown after cancellation may take; nil for one
    ///   pass that stops at the first failure.
    public func run(shutdownGrace: Duration? = .seconds(2)) async {
        await deliverUntilCancelled()
        guard Task.isCancelled else { return }
        // A task of its own, awaited here: the cancellation that asked for the shutdown must not
        // cut it short.
        _ = await Task { await self.shutdown(timeout: shutdownGrace) }.value
    }

    /// The delivery loop of ``run(shutdownGrace:)`` without the shutdown after it: until the
    /// calling task is cancelled (once the pass in flight has ended), or the uploader is shut
    /// down or stopped. ``Beacon/run()`` runs it, and ends the tracker itself.
    func deliverUntilCancelled() async {
        // The same loop as start()'s; the caller's reference keeps this uploader for its length.
        await Self.runWhileReferenced(WeakUploader(self), time: time)
    }

    /// Runs the delivery loop in a task the uploader keeps: for owners without a task of their own
    /// to run ``run(shutdownGrace:)`` in. ``shutdown(timeout:)`` ends and joins it, ``stop()`` ends it, and so
    /// does the uploader's release: the loop holds the uploader only while a pass runs, so an
    /// uploader dropped without ``stop()`` is freed (and its loop ends) once its pass is over.
    /// Calling it again does nothing, and so does calling it while ``run(shutdownGrace:)`` delivers.
    public nonisolated func start() {
        scheduling.withLock { s in
            guard s.backgroundLoop == nil, s.machine.loop.id == 0, s.machine.state != .stopped, !s.machine.isShuttingDown else { return }
            let reference = WeakUploader(self)
            s.backgroundLoop = Task { [time] in await Self.runWhileReferenced(reference, time: time) }
        }
    }

    /// A reference to an uploader that does not keep it.
    final class WeakUploader: Sendable {
        weak let uploader: Uploader?
        init(_ uploader: Uploader) { self.uploader = uploader }
    }

    /// The delivery loop of ``run(shutdownGrace:)`` and ``start()``: the uploader is held during a turn (a pass),
    /// never while the loop sleeps; released meanwhile (``start()``'s task), its `deinit` wakes the
    /// loop, which then ends.
    static func runWhileReferenced(_ reference: WeakUploader, time: MonotonicTime) async {
        guard let (id, wakeup) = reference.uploader?.loopBegan() else { return }
        defer { reference.uploader?.loopEnded(id, wakeup) }
        while !Task.isCancelled {
            switch await turn(reference, id) {
            case .exit: return
            case .again: continue
            case .wait(let until): await wakeup.wait(until: until, time: time)
            }
        }
    }

    /// One turn of the loop of `reference`'s uploader, holding it for the turn only.
    private static func turn(_ reference: WeakUploader, _ id: UInt64) async -> LoopTurn {
        guard let uploader = reference.uploader else { return .exit }
        return await uploader.loopTurn(id)
    }

    /// What the delivery loop does after a turn.
    enum LoopTurn: Sendable {
        case exit
        /// A pass ran: decide again at once.
        case again
        /// Sleep until signalled or until the monotonic time `until` (nil: no limit).
        case wait(until: Duration?)
    }

    /// Registers a delivery loop: a loop started later takes over (the one it replaces is woken
    /// and returns after its pass).
    nonisolated func loopBegan() -> (UInt64, Wakeup) {
        let wakeup = Wakeup()
        let (id, replaced) = scheduling.withLock { s -> (UInt64, Wakeup?) in
            let (id, wakeReplaced) = s.machine.loopStarted(now: time.now())
            let replaced = wakeReplaced ? s.wakeup : nil
            s.wakeup = wakeup
            return (id, replaced)
        }
        replaced?.signal()
        return (id, wakeup)
    }

    nonisolated func loopEnded(_ id: UInt64, _ wakeup: Wakeup) {
        scheduling.withLock { s in
            s.machine.loopEnded(id)
            if s.wakeup === wakeup { s.wakeup = nil }
        }
    }

    /// Asks the scheduler what loop `id` does now, and runs the pass when it says so.
    func loopTurn(_ id: UInt64) async -> LoopTurn {
        let now = time.now()
        switch scheduling.withLock({ $0.machine.loopStep(id, now: now) }) {
        case .exit:
            return .exit
        case .wait(let until):
            return .wait(until: until)
        case .probe:
            let reachable = await probeCollector()
            scheduling.withLock { $0.machine.probeEnded(reachable: reachable, now: time.now()) }
            return .again
        case .pass:
            let pass = await cancellable(shielded: true) { await self.drain(deadline: nil) }
            let end = passEnd(pass)
            lastLoopPassSent = pass.sent
            let action = scheduling.withLock { $0.machine.loopPassEnded(end, by: id) }
            perform(action)
            return .again
        }
    }

    /// Tells the uploader that `count` events were appended: a pass starts once `flushBulkSize`
    /// are unsent. Cheap and non-blocking; call it from the append path.
    public nonisolated func recordsAppended(_ count: Int = 1) {
        let wakeup = scheduling.withLock { s -> Wakeup? in
            s.machine.countChanged(unsent: s.machine.trigger.unsent + count) == .wakeLoop ? s.wakeup : nil
        }
        wakeup?.signal()
    }

    /// Tells the uploader how many events the log holds pending (the tracker's append hook): a
    /// pass starts once at least `flushBulkSize` are pending. Cheap and non-blocking.
    public nonisolated func recordsPending(_ pending: UInt64) {
        let wakeup = scheduling.withLock { s -> Wakeup? in
            s.machine.countChanged(unsent: Int(clamping: pending)) == .wakeLoop ? s.wakeup : nil
        }
        wakeup?.signal()
    }

    /// Stops without uploading (the log is being closed): the loop ends, and the pass, flush or
    /// drain that runs is cancelled (its events stay pending). Returns at once.
    public nonisolated func stop() {
        let (action, wakeup, cancel, queued, probe) = scheduling.withLock { s in
            let action = s.machine.stopRequested()
            let queued = action == .cancel(refuseQueuedFlush: true) ? s.queuedFlush.take() : nil
            return (action, s.wakeup, s.cancel, queued, s.probe)
        }
        guard action != .none else { return }
        probe?.cancel()
        wakeup?.signal()
        cancel?.cancel()
        queued?.resume(returning: false)
    }

    /// Carries out what the scheduler decided after a pass or flush.
    func perform(_ action: UploaderScheduler.PassAction) {
        switch action {
        case .none:
            break
        case .wakeLoop:
            scheduling.withLock { $0.wakeup }?.signal()
        case .startQueuedFlush:
            scheduling.withLock { $0.queuedFlush.take() }?.resume(returning: true)
        case .resumeShutdown:
            scheduling.withLock { $0.shutdownWaiter.take() }?.resume()
        case .invalid(let transition):
            report(transition.diagnostic)
        }
    }

    /// Reports an input a state machine could not take (``InvalidTransition``), if there was one.
    func reportInvalid(_ transition: InvalidTransition?) {
        if let transition { report(transition.diagnostic) }
    }

    /// Runs `body` (a pass, a flush or the final drain) so that ``stop()`` or the shutdown's
    /// deadline can cancel it, and, unless `shielded`, the caller's own cancellation.
    ///
    /// The body runs in a task of its own that this awaits before returning (it never outlives
    /// the call): the delivery loop's passes are `shielded`, so cancelling the task that runs the
    /// loop does not abandon a request the collector may already have accepted (a graceful
    /// shutdown would send it again); the shutdown that follows waits for the pass, and cancels
    /// it at its deadline.
    func cancellable<T: Sendable>(shielded: Bool = false, _ body: @escaping @Sendable () async -> T) async -> T {
        // On the uploader's own thread: one hand-off to it per pass, none per request.
        let task = Task(executorPreference: passThread) { await body() }
        let (id, stopped) = scheduling.withLock { s -> (UInt64, Bool) in
            s.lastCancelId += 1
            s.cancel = Cancel(id: s.lastCancelId) { task.cancel() }
            return (s.lastCancelId, s.machine.cancelsWork)
        }
        if stopped { task.cancel() }
        defer { scheduling.withLock { s in if s.cancel?.id == id { s.cancel = nil } } }
        if shielded { return await task.value }
        return await withTaskCancellationHandler { await task.value } onCancel: { task.cancel() }
    }

    /// Cancels the pass, flush or drain that runs (the shutdown's deadline).
    nonisolated func cancelRunning() {
        scheduling.withLock { $0.cancel }?.cancel()
    }

    /// How a pass ended, for the scheduler: after a failure, when the next attempt may start
    /// (the backoff, or the collector's `Retry-After`).
    func passEnd(_ pass: Pass) -> UploaderScheduler.PassEnd {
        switch pass.outcome {
        case .drained, .noData:
            return .completed(pending: Int(clamping: pendingEvents))
        case .deadline:
            return .cancelled
        case .failed(let failure):
            failedPasses += 1
            let delay = DeliveryTiming.wait(afterFailedPasses: failedPasses, retryAfter: failure.retryAfter, backoff: configuration.backoff)
            return .failed(retryAt: time.now() + delay, retryAfter: failure.retryAfter != nil, unanswered: failure.error.isUnanswered && transport is any ReachabilityProbing)
        }
    }
}
