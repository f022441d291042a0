import BeaconLog
import Foundation

/// How a tracker runs and ends: ``TrackerLifecycle`` decides, this carries it out.
extension Beacon {
    /// The lifecycle machine, the report once the tracker has ended, and the tasks waiting for it
    /// (blocked threads wait on the lock's condition).
    struct Life: Sendable {
        var machine: TrackerLifecycle
        var report: FlushResult?
        var waiters: [CheckedContinuation<FlushResult, Never>] = []
    }

    // MARK: Running

    /// Delivers while the calling task runs; when the task is cancelled, shuts the tracker down
    /// with ``Configuration/shutdownGrace`` as the deadline and returns once it is closed.
    ///
    /// For owners that run services as `run()` methods (swift-service-lifecycle, a task group):
    /// delivery then happens in the caller's task instead of the tracker's own background task
    /// (a tracker nobody runs delivers on its own, as before). `run()` also returns, without
    /// being cancelled, when the tracker is ended another way (``shutdown(timeout:)``,
    /// ``close()``). It never throws: what fails while delivering is retried, counted in
    /// ``deliveryStats`` and reported as a diagnostic. In a service group it satisfies
    /// `Service`'s `run() async throws` as it is.
    ///
    /// ```swift
    /// await withDiscardingTaskGroup { group in
    ///     group.addTask { await beacon.run() }
    ///     // ... cancel the group to stop: what is pending is delivered within shutdownGrace
    /// }
    /// ```
    public func run() async {
        await deliverUntilEnded(cancelledBy: .runCancelled)
    }

    /// `run()`: delivers in this task until the tracker ends; on cancellation, feeds `input`.
    func deliverUntilEnded(cancelledBy input: TrackerLifecycle.Input) async {
        guard lifecycle(.run).action == .deliver else {
            _ = await waitForEnd()
            return
        }
        await withTaskCancellationHandler {
            if let uploader = delivery.uploader { await uploader.deliverUntilCancelled() }
            _ = await waitForEnd()
        } onCancel: {
            guard case .end(let ending) = lifecycle(input).action else { return }
            // The ending must not be cut short by the cancellation that started it: it runs in a
            // task of its own, which run() awaits (through waitForEnd) before returning.
            Task { await self.carryOut(ending) }
        }
    }

    // MARK: Ending

    /// Tracks `$AppEnd` (with the uptime), writes everything tracked, fsyncs, and closes the log,
    /// releasing its lock. Nothing is uploaded: a request in flight is cancelled and pending events
    /// stay on disk for the next run (``shutdown(timeout:)`` delivers them first). Later `track`
    /// calls are dropped (counted as `DropReason.closed`).
    ///
    /// Any later ending (`close`, `shutdown`, a cancelled `run()`) returns at once with this
    /// report: `sent` 0, the events left on disk, `.deadlineReached` if there are any (a close
    /// is a shutdown with no time to deliver), else `.noData`. If the tracker is already ending,
    /// waits for that ending instead.
    public func close() async {
        switch lifecycle(.close).action {
        case .end(let ending): _ = await carryOut(ending)
        case .waitForEnd: _ = await waitForEnd()
        case .deliver, .report, .resumeWaiters, .none, .invalid: break
        }
    }

    /// The blocking form of ``close()``, for tools and child processes: blocks the calling thread
    /// until the tracker is closed (also when another ending runs). Not for Swift concurrency's
    /// threads: use ``close()`` there.
    public func closeNow() {
        switch lifecycle(.close).action {
        case .end: closeWithoutUpload()
        case .waitForEnd: waitUntilEnded()
        case .deliver, .report, .resumeWaiters, .none, .invalid: break
        }
    }

    /// Stops the tracker and delivers what it can before the deadline.
    ///
    /// Stops accepting events (tracking `$AppEnd`), drains the writer and fsyncs, uploads until
    /// drained, failed or the deadline (a request that cannot finish before the deadline is not
    /// started; one still running at the deadline is cancelled and its events are sent again,
    /// with the same idempotency key, by the next run), closes the log (the checkpoint is already
    /// durable after every acknowledged batch) and releases its locks. Concurrent and later calls,
    /// and a later ``close()``, get the same report; after ``close()`` this returns close's report
    /// (its `dropped` brought up to date: events tracked after the end count as closed).
    /// The shutdown runs to its end even if the calling task is cancelled.
    ///
    /// ```swift
    /// let report = await beacon.shutdown(timeout: .seconds(1))
    /// print("sent \(report.sent), \(report.remaining) left on disk: \(report.outcome)")
    /// ```
    /// - Parameter timeout: how long from now shutdown may take; nil for no limit.
    /// - Returns: events sent during shutdown, events left on disk, and why it stopped.
    @discardableResult
    public func shutdown(timeout: Duration? = nil) async -> FlushResult {
        let (action, report) = lifecycle(.shutdown(deadline: timeout))
        switch action {
        // A task of its own, awaited here: the shutdown runs to its end even if the caller is
        // cancelled (a cancelled caller would cut its requests short and send them again).
        case .end(let ending): return await Task { await self.carryOut(ending) }.value
        // Events tracked after the end are dropped (closed): the kept report counts them too.
        case .report: if let report { return reportingLosses(report) }
        case .deliver, .waitForEnd, .resumeWaiters, .none, .invalid: break
        }
        return await waitForEnd()
    }

    // MARK: The shell

    /// Feeds `input` to the lifecycle; returns its action and the report if the tracker has ended.
    /// An input the machine refuses as impossible is reported here (``InvalidTransition``).
    func lifecycle(_ input: TrackerLifecycle.Input) -> (action: TrackerLifecycle.Action, report: FlushResult?) {
        let (action, report) = life.withLock { held in (held.state.machine.handle(input), held.state.report) }
        if case .invalid(let transition) = action { configuration.diagnostics(transition.diagnostic) }
        return (action, report)
    }

    /// Carries out an ending the lifecycle handed to this caller.
    @discardableResult
    func carryOut(_ ending: TrackerLifecycle.Ending) async -> FlushResult {
        switch ending {
        case .close:
            return await BlockingQueue.run { [self] in closeWithoutUpload() }
        case .shutdown(let deadline):
            let time = delivery.time
            let target = deadline.map { time.now() + $0 }
            await BlockingQueue.run { [self] in finishWriting() }
            var result: FlushResult
            if let uploader = delivery.uploader {
                result = await uploader.shutdown(timeout: target.map { max(.zero, $0 - time.now()) })
            } else {
                result = noDelivery()
            }
            await BlockingQueue.run { [self] in closeLog() }
            result.remaining = pendingOnDisk()
            return ended(reportingLosses(result))
        }
    }

    /// The ``TrackerLifecycle/Ending/close`` ending, on the calling thread.
    @discardableResult
    func closeWithoutUpload() -> FlushResult {
        finishWriting()
        delivery.uploader?.stop()
        closeLog()
        let pending = pendingOnDisk()
        guard delivery.uploader != nil else { return ended(noDelivery()) }
        return ended(reportingLosses(FlushResult(sent: 0, remaining: pending, outcome: pending == 0 ? .noData : .deadlineReached)))
    }

    /// The ``TrackerLifecycle/Ending/close`` ending of a released tracker (`deinit`), without
    /// blocking the calling thread: `$AppEnd` is queued, delivery stopped, and the writer thread
    /// writes what is queued, fsyncs and closes the log. What the work after `deinit` needs is
    /// captured; the tracker itself is not.
    func closeInBackground() {
        var appEnd: [UInt8]?
        if configuration.lifecycleEvents {
            appEnd = accept(RecordEncoder.Input(type: .track, event: "$AppEnd", isBeaconEvent: true, properties: [:], distinctId: nil,
                                                durationMicroseconds: Beacon.microseconds(elapsed()), withPresets: true))
        }
        delivery.uploader?.stop()
        let log = log, limiter = diagnosticLimiter, diagnostics = configuration.diagnostics
        let directory = log.directory.path
        BackgroundCloses.began(directory)
        writer.closeInBackground(appending: appEnd) {
            do { try log.sync() } catch { diagnostics(BeaconDiagnostic(kind: .storage, message: "\(error)")) }
            do { try log.close() } catch { diagnostics(BeaconDiagnostic(kind: .storage, message: "\(error)")) }
            limiter.flush()
            BackgroundCloses.ended(directory)
        }
    }

    /// Records the report, closes the lifecycle and wakes every caller waiting for the end.
    func ended(_ report: FlushResult) -> FlushResult {
        let (action, waiters) = life.withLock { held -> (TrackerLifecycle.Action, [CheckedContinuation<FlushResult, Never>]) in
            let action = held.state.machine.handle(.ended)
            guard action == .resumeWaiters else { return (action, []) }
            held.state.report = report
            held.broadcast()
            defer { held.state.waiters = [] }
            return (action, held.state.waiters)
        }
        if case .invalid(let transition) = action { configuration.diagnostics(transition.diagnostic) }
        for waiter in waiters { waiter.resume(returning: report) }
        return report
    }

    /// Suspends until the tracker has ended; returns its report.
    func waitForEnd() async -> FlushResult {
        await withCheckedContinuation { continuation in
            let report = life.withLock { held -> FlushResult? in
                if let report = held.state.report { return report }
                held.state.waiters.append(continuation)
                return nil
            }
            if let report { continuation.resume(returning: report) }
        }
    }

    /// Blocks until the tracker has ended; at once on the writer thread (a hook closing the
    /// tracker), which the ending itself waits for.
    func waitUntilEnded() {
        guard !writer.isWriterThread else { return }
        life.withLock { held in
            while held.state.report == nil { held.wait() }
        }
    }

    /// Stops accepting records (after `$AppEnd`), drains the writer and fsyncs the log. The log
    /// stays open, so the delivery side can still upload before ``closeLog()``. Only an ending
    /// calls it, once.
    func finishWriting() {
        if configuration.lifecycleEvents {
            let uptime = elapsed()
            record(RecordEncoder.Input(type: .track, event: "$AppEnd", isBeaconEvent: true, properties: [:], distinctId: nil,
                                       durationMicroseconds: Beacon.microseconds(uptime), withPresets: true))
        }
        writer.close()
        do { try log.sync() } catch { noteStorageError(error) }
    }

    /// Closes the log (final fsync, locks released). Only an ending calls it, once.
    func closeLog() {
        do { try log.close() } catch { noteStorageError(error) }
        diagnosticLimiter.flush()   // what rate limiting held back is reported, not lost
    }
}
