import BeaconLog
import Dispatch
import Foundation
import Glibc
import Synchronization

/// The tracker's delivery side: the uploader, and what shutdown and `run()` share.
final class DeliveryState: Sendable {
    /// Nil when the tracker has no ``Beacon/Configuration/serverURL`` (events stay on disk).
    let uploader: Uploader?
    let time: MonotonicTime
    let shutdown = Mutex<Shutdown>(Shutdown())
    let signalSources = Mutex<SignalSources?>(nil)

    /// The installed signal sources, kept alive for the process's lifetime. Dispatch sources are
    /// thread-safe but not marked `Sendable`.
    final class SignalSources: @unchecked Sendable {
        let sources: [any DispatchSourceSignal]
        init(_ sources: [any DispatchSourceSignal]) { self.sources = sources }
    }

    struct Shutdown {
        var task: Task<FlushResult, Never>?
        var result: FlushResult?
        var waiters: [CheckedContinuation<Void, Never>] = []
        var signalled = false
    }

    init(configuration: Beacon.Configuration, log: BeaconLog) {
        time = MonotonicTime(configuration.monotonicClock)
        var delivery = configuration.delivery
        if let url = configuration.serverURL {
            if delivery == nil { delivery = DeliveryConfiguration(url: url) }
            delivery?.url = url
        }
        guard let delivery, configuration.logAccess == .readWrite else {
            uploader = nil
            return
        }
        let diagnostics = configuration.diagnostics
        uploader = Uploader(
            log: log, configuration: delivery, transport: configuration.transport,
            clock: configuration.monotonicClock, now: configuration.wallClock,
            diagnostics: { diagnostics(BeaconDiagnostic(kind: .delivery, message: $0)) })
    }
}

extension Beacon {
    /// Hooks the uploader to the writer (count trigger) and starts it: the interval timer, and
    /// events left pending by earlier runs.
    func startDelivery() {
        guard let uploader = delivery.uploader else { return }
        setOnAppended { pending in uploader.recordsPending(pending) }
        Task { await uploader.start() }
    }

    /// Delivers every event tracked so far, now.
    ///
    /// Waits until the events tracked before the call are in the log, then uploads until nothing
    /// is pending, a request fails (the events stay stored and are retried with backoff), or the
    /// deadline. Concurrent callers share one flush.
    ///
    /// ```swift
    /// let result = await beacon.flush(deadline: .seconds(2))
    /// ```
    /// - Parameter deadline: how long from now the flush may take; nil for no limit (each request
    ///   still has the request timeout). No request is started that cannot finish before it.
    public func flush(deadline: Duration? = nil) async -> FlushResult {
        guard let uploader = delivery.uploader else { return noDelivery() }
        await BlockingQueue.run { [writer] in writer.waitUntilWritten() }
        return reportingLosses(await uploader.flush(deadline: deadline))
    }

    /// Counters and state of delivery (all zero without a ``Configuration/serverURL``).
    public var deliveryStats: DeliveryStats {
        get async {
            guard let uploader = delivery.uploader else {
                var stats = DeliveryStats()
                stats.pendingEvents = log.stats.pendingRecords
                stats.droppedEvents = quotaDrops.count(log)
                return stats
            }
            return await uploader.stats
        }
    }

    /// Stops the tracker and delivers what it can before the deadline.
    ///
    /// Stops accepting events (tracking `$AppEnd`), drains the writer and fsyncs, uploads until
    /// drained, failed or the deadline (a request that cannot finish before the deadline is not
    /// started; one still running at the deadline is cancelled and its events are sent again,
    /// with the same idempotency key, by the next run), closes the log (the checkpoint is already
    /// durable after every acknowledged batch) and releases its locks. Concurrent and later calls
    /// return the same report.
    ///
    /// ```swift
    /// let report = await beacon.shutdown(deadline: .seconds(1))
    /// print("sent \(report.sent), \(report.remaining) left on disk: \(report.outcome)")
    /// ```
    /// - Parameter deadline: how long from now shutdown may take; nil for no limit.
    /// - Returns: events sent during shutdown, events left on disk, and why it stopped.
    @discardableResult
    public func shutdown(deadline: Duration? = nil) async -> FlushResult {
        let task = delivery.shutdown.withLock { s -> Task<FlushResult, Never> in
            if let task = s.task { return task }
            let task = Task { await self.performShutdown(deadline: deadline) }
            s.task = task
            return task
        }
        return await task.value
    }

    func performShutdown(deadline: Duration?) async -> FlushResult {
        let time = delivery.time
        let target = deadline.map { time.now() + $0 }
        // Claim the closing of the log first, so that a concurrent close() waits for the upload
        // instead of closing the log under it.
        guard logClosed.tryStart() else {
            // close() got there first: the log is closed or closing; nothing more can be sent.
            await BlockingQueue.run { [self] in logClosed.waitUntilFinished() }
            let result = reportingLosses(FlushResult(sent: 0, remaining: pendingOnDisk(), outcome: .failed(DeliveryError(.stopped, "the tracker was closed with close() before shutdown(); pending events stay on disk"))))
            resumeRunWaiters(result)
            return result
        }
        await BlockingQueue.run { [self] in finishWriting() }
        var result: FlushResult
        if let uploader = delivery.uploader {
            let left = target.map { max(.zero, $0 - time.now()) }
            result = await uploader.shutdown(deadline: left)
        } else {
            result = noDelivery()
        }
        await BlockingQueue.run { [self] in closeLogNow() }
        logClosed.finish()
        result.remaining = pendingOnDisk()
        return resumeRunWaiters(reportingLosses(result))
    }

    /// Records how the tracker ended (once) and wakes the `run()` callers; returns the result kept.
    @discardableResult
    func resumeRunWaiters(_ result: FlushResult) -> FlushResult {
        let (kept, waiters) = delivery.shutdown.withLock { s -> (FlushResult, [CheckedContinuation<Void, Never>]) in
            if s.result == nil { s.result = result }
            defer { s.waiters = [] }
            return (s.result!, s.waiters)
        }
        for waiter in waiters { waiter.resume() }
        return kept
    }

    /// Runs until the tracker is shut down, for owners that manage services as `run()` methods
    /// (swift-service-lifecycle style). Cancelling the task that runs it shuts the tracker down
    /// with `gracePeriod` as the deadline; `run()` returns once shutdown is complete.
    ///
    /// ```swift
    /// try await beacon.run()
    /// ```
    public func run(gracePeriod: Duration = .seconds(1)) async throws {
        await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
                let done = delivery.shutdown.withLock { s -> Bool in
                    if s.result != nil { return true }
                    s.waiters.append(continuation)
                    return false
                }
                if done { continuation.resume() }
            }
        } onCancel: {
            Task { await self.shutdown(deadline: gracePeriod) }
        }
    }

    /// On SIGTERM or SIGINT, shuts the tracker down with `grace` as the deadline (so the last
    /// batch can go out before the process ends), then exits the process with status 128 + the signal number.
    /// A second signal during shutdown exits at once. Opt-in; installing it again does nothing.
    ///
    /// The signals are ignored for their default action (`signal(SIG_IGN)`) and watched with
    /// `DispatchSource.makeSignalSource`; the handler keeps the tracker alive.
    ///
    /// ```swift
    /// beacon.installTerminationHandler(grace: .seconds(1))
    /// ```
    public func installTerminationHandler(grace: Duration = .seconds(1)) {
        let installed = delivery.signalSources.withLock { $0 != nil }
        guard !installed else { return }
        var sources: [any DispatchSourceSignal] = []
        for signo in [SIGTERM, SIGINT] {
            signal(signo, SIG_IGN)
            let source = DispatchSource.makeSignalSource(signal: signo, queue: .global())
            source.setEventHandler { [self] in
                let again = delivery.shutdown.withLock { s -> Bool in
                    defer { s.signalled = true }
                    return s.signalled
                }
                if again { exit(128 + signo) }
                Task {
                    await self.shutdown(deadline: grace)
                    exit(128 + signo)
                }
            }
            source.resume()
            sources.append(source)
        }
        let box = DeliveryState.SignalSources(sources)
        delivery.signalSources.withLock { $0 = box }
    }

    /// `result` with every event the tracker lost since it opened (``BeaconStats/dropped``) added
    /// to what delivery lost.
    func reportingLosses(_ result: FlushResult) -> FlushResult {
        var result = result
        for (reason, count) in stats.dropped where count > 0 { result.dropped[reason] = count }
        return result
    }

    func noDelivery() -> FlushResult {
        let pending = pendingOnDisk()
        if pending == 0 { return reportingLosses(FlushResult(sent: 0, remaining: 0, outcome: .noData)) }
        return reportingLosses(FlushResult(sent: 0, remaining: pending, outcome: .failed(DeliveryError(.configuration, "the tracker has no serverURL (or opened the log with .write access), so \(pending) events stay on disk; set Configuration.serverURL or run `beacon send` on the directory"))))
    }

    func pendingOnDisk() -> UInt64 {
        log.stats.pendingRecords
    }

}
