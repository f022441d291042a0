import BeaconLog
import Dispatch
import Foundation
import Synchronization

/// Delivers a log's events to a collector, in order, one request at a time.
///
/// The uploader reads contiguous batches from the log's checkpoint, sends each through a
/// ``Transport`` and acknowledges it when the collector answers 2xx, so the checkpoint advances
/// durably. Other answers (``AnswerAction``, or ``DeliveryConfiguration/classifyAnswer``):
/// transient failures are retried with exponential backoff and full jitter on a monotonic clock
/// (honouring `Retry-After`), and a batch that keeps failing is isolated so one bad event cannot
/// stall the queue; 413 splits the batch; 400 and 422 bisect to the refused events, which go to
/// `rejected.jsonl`; 401, 403, 404 and other 4xx pause delivery with backoff and are reported,
/// dropping nothing.
///
/// The decisions are ``DeliveryStateMachine``'s (one batch) and ``DeliveryTiming``'s (deadlines,
/// backoff); this actor does the I/O: it reads the log, sends through the transport, writes
/// `rejected.jsonl` and `delivery.inflight`, acknowledges, and sleeps.
///
/// Flushes start when `flushBulkSize` events are pending (``recordsAppended(_:)``), every
/// `flushInterval`, on ``flush(deadline:)``, at ``start()`` (events left by earlier runs) and at
/// ``shutdown(deadline:)``. Nothing runs while idle except the interval timer and a pending retry.
///
/// ```swift
/// let log = try BeaconLog(directory: "/var/lib/app/events")
/// let uploader = Uploader(log: log, configuration: .init(url: URL(string: "https://c.example/e")!))
/// await uploader.start()
/// let result = await uploader.flush()
/// ```
///
/// Requests are built by ``RequestBuilder``: `Idempotency-Key` is the same for the same events,
/// across retries and restarts (the range in flight and its sends are kept in
/// `delivery.inflight`), and `X-Beacon-Retry` counts the earlier sends of those events, across
/// flushes and restarts.
public actor Uploader {
    /// The library version sent in `User-Agent`.
    public static let version = Beacon.libraryVersion

    /// The log events are read from and acknowledged in (it needs the reader lock).
    public nonisolated let log: BeaconLog
    /// The delivery settings.
    public nonisolated let configuration: DeliveryConfiguration
    let transport: any Transport
    let time: MonotonicTime
    let wallClock: @Sendable () -> Date
    let diagnostics: @Sendable (String) -> Void
    let rejectedFile: RejectedFile
    let inflightFile: InflightFile
    let requests: RequestBuilder
    /// Pending events the log's quota deleted since the uploader started (see `reportingLosses`).
    let quotaDrops = QuotaDrops()
    /// The log's reads, the batch read ahead and the acknowledgements (checkpoint writes, fsync)
    /// run here, one at a time, in the order they were started.
    let ioQueue = BlockingQueue(label: "beacon.uploader.io")
    nonisolated let trigger = Mutex(Trigger())

    struct Trigger {
        var unsent = 0
        var armed = false
        var stopped = false
    }

    var counters = DeliveryStats()
    var drainTask: Task<Pass, Never>?
    var flushTask: Task<FlushResult, Never>?
    var intervalTask: Task<Void, Never>?
    var retryTask: Task<Void, Never>?
    /// Monotonic time before which no background attempt is made (backoff).
    var notBefore: Duration = .zero
    /// Monotonic time before which no attempt at all is made (the collector's `Retry-After`).
    var retryAfterUntil: Duration = .zero
    var lastFailure: DeliveryError?
    /// Passes in a row that ended with a failure (the backoff's exponent); zero after a 2xx.
    var failedPasses = 0
    /// The batch being delivered and its state machine, kept across passes.
    var current: Session?
    var inflightLoaded = false
    /// The range of the last request as `delivery.inflight` holds it (or an earlier run's, at the checkpoint).
    var savedInflight: InflightFile.Range?
    /// Ranges an earlier run left in `delivery.inflight` that the checkpoint has not reached yet.
    var earlierInflight: [InflightFile.Range] = []
    /// The acknowledgements of the last batches while they are made durable, overlapping the next
    /// requests; oldest first, at most ``maxOutstandingAcknowledgements``.
    var acknowledging: [Acknowledging] = []
    /// The next batch, read while the current request is in flight.
    var readAhead: ReadAhead?
    /// The seqs this uploader wrote to `rejected.jsonl` (expired or refused) that the checkpoint
    /// has not passed yet: a batch read again after a failed send must not set the same events
    /// aside twice. A set, not a high-water mark: an expired event set aside first must not hide a
    /// refused event before it in the same batch.
    var setAside: Set<UInt64> = []
    var lastRequestDuration: Duration = .zero
    /// The last `Date` header a collector sent, parsed.
    var lastCollectorDate: (text: String, seconds: Int64)?
    var started = false
    var stopped = false
    /// Flush calls that joined a flush already running (for tests).
    var sharedFlushJoins = 0

    /// An uploader for `log`, sending with `transport` (default: ``defaultTransport(for:environment:)``
    /// for the configured URL).
    ///
    /// - Parameters:
    ///   - log: an open log holding the reader lock (access `.readWrite` or `.read`).
    ///   - configuration: where and how to send.
    ///   - transport: how requests are sent (nil: ``defaultTransport(for:environment:)``); tests
    ///     pass an in-memory one.
    ///   - clock: the monotonic clock for backoff, intervals and deadlines.
    ///   - now: the wall clock, for `X-Beacon-Sent-At`, clock skew and event expiry.
    ///   - diagnostics: where loud reports go (paused delivery); standard error by default.
    public init(
        log: BeaconLog,
        configuration: DeliveryConfiguration,
        transport: (any Transport)? = nil,
        clock: any Clock<Duration> = ContinuousClock(),
        now: @escaping @Sendable () -> Date = { Date() },
        diagnostics: @escaping @Sendable (String) -> Void = { FileHandle.standardError.write(Data(("beacon: " + $0 + "\n").utf8)) }
    ) {
        precondition(configuration.batchSize > 0, "batchSize must be positive")
        precondition(configuration.maxBatchBytes > 0, "maxBatchBytes must be positive")
        precondition(configuration.flushBulkSize > 0, "flushBulkSize must be positive")
        precondition(configuration.isolateAfterFailures > 0, "isolateAfterFailures must be positive")
        precondition((configuration.catchUpBatchSize ?? 1) > 0, "catchUpBatchSize must be positive")
        self.log = log
        self.configuration = configuration
        self.transport = transport ?? Self.defaultTransport(for: configuration.url)
        self.time = MonotonicTime(clock)
        self.wallClock = now
        self.diagnostics = diagnostics
        self.rejectedFile = RejectedFile(directory: log.configuration.directory, fileSystem: log.configuration.fileSystem)
        self.inflightFile = InflightFile(directory: log.configuration.directory, fileSystem: log.configuration.fileSystem)
        self.requests = RequestBuilder(configuration: configuration)
        quotaDrops.opened(log)
    }

    // MARK: Triggers

    /// Starts the interval timer and sends events left pending by earlier runs. Calling it again
    /// does nothing.
    public func start() {
        guard !started, !stopped else { return }
        started = true
        if let interval = configuration.effectiveFlushInterval {
            intervalTask = Task { [time] in
                while true {
                    let next = time.now() + interval
                    do { try await time.sleepUntil(next) } catch { return }
                    self.kick()
                }
            }
        }
        kick()
    }

    /// Tells the uploader that `count` events were appended: a flush starts once
    /// `flushBulkSize` are unsent. Cheap and non-blocking; call it from the append path.
    public nonisolated func recordsAppended(_ count: Int = 1) {
        let fire = trigger.withLock { t -> Bool in
            t.unsent += count
            if t.stopped || t.armed || t.unsent < configuration.flushBulkSize { return false }
            t.armed = true
            return true
        }
        if fire { Task { await self.kick() } }
    }

    /// Tells the uploader how many events the log holds pending (the tracker's append hook): a
    /// flush starts once at least `flushBulkSize` are pending. Cheap and non-blocking.
    public nonisolated func recordsPending(_ pending: UInt64) {
        let fire = trigger.withLock { t -> Bool in
            t.unsent = Int(clamping: pending)
            if t.stopped || t.armed || pending < UInt64(configuration.flushBulkSize) { return false }
            t.armed = true
            return true
        }
        if fire { Task { await self.kick() } }
    }

    /// Stops the timers and triggers without uploading (the log is being closed). Returns at once.
    public nonisolated func stop() {
        trigger.withLock { $0.stopped = true }
        Task { await self.stopTimers() }
    }

    func stopTimers() {
        stopped = true
        intervalTask?.cancel()
        intervalTask = nil
        retryTask?.cancel()
        retryTask = nil
    }

    /// Starts a background drain unless one runs, a flush runs, or a backoff is pending.
    /// Returns whether it started one.
    @discardableResult
    func kick() -> Bool {
        guard started, !stopped, drainTask == nil, flushTask == nil, time.now() >= notBefore else { return false }
        drainTask = Task {
            let pass = await self.drain(deadline: nil)
            self.passFinished(pass)
            return pass
        }
        return true
    }

    // MARK: Flush and shutdown

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
    /// (401, 403, 404, …) or a storage error ends the flush at once. Concurrent callers share one flush and get the
    /// same result.
    ///
    /// - Parameter deadline: how long from now the flush may take; nil for one pass that stops at
    ///   the first failure (each request still has `requestTimeout`).
    public func flush(deadline: Duration? = nil) async -> FlushResult {
        if let running = flushTask {
            sharedFlushJoins += 1
            return reportingLosses(await running.value)
        }
        let target = deadline.map { time.now() + $0 }
        let task = Task { await self.runFlush(until: target, shuttingDown: false) }
        flushTask = task
        let result = await task.value
        flushTask = nil
        return reportingLosses(result)
    }

    /// Stops the triggers, then delivers what is pending until drained or the deadline, retrying
    /// transient failures with backoff as ``flush(deadline:)`` does; a request still running at
    /// the deadline is cancelled (its events stay pending and are sent again, with the same
    /// idempotency key, after the next start). Further flushes do nothing.
    ///
    /// - Parameter deadline: how long from now shutdown may take; nil for one pass that stops at
    ///   the first failure.
    public func shutdown(deadline: Duration? = nil) async -> FlushResult {
        let target = deadline.map { time.now() + $0 }
        stopped = true
        trigger.withLock { $0.stopped = true }
        intervalTask?.cancel()
        intervalTask = nil
        retryTask?.cancel()
        retryTask = nil
        if let running = flushTask {
            if await value(of: running, until: target) == nil {
                // Cancel the flush itself too: it may be asleep until a Retry-After, or between
                // drains, where cancelling the drain alone does not reach it.
                running.cancel()
                drainTask?.cancel()
                _ = await running.value
                return reportingLosses(FlushResult(sent: 0, remaining: pendingEvents, outcome: .deadlineReached))
            }
        }
        return reportingLosses(await runFlush(until: target, shuttingDown: true))
    }

    func runFlush(until target: Duration?, shuttingDown: Bool) async -> FlushResult {
        var sentBefore = 0
        if let running = drainTask {
            guard let pass = await value(of: running, until: target) else {
                if shuttingDown {
                    running.cancel()
                    let pass = await running.value
                    return FlushResult(sent: pass.sent, remaining: pendingEvents, outcome: .deadlineReached)
                }
                return FlushResult(sent: 0, remaining: pendingEvents, outcome: .deadlineReached)
            }
            sentBefore = pass.sent
        }
        if stopped && !shuttingDown {
            return FlushResult(sent: 0, remaining: pendingEvents, outcome: .failed(DeliveryError(.stopped, "the uploader is shut down; start a new one to deliver the \(pendingEvents) pending events")))
        }
        if retryAfterUntil > time.now() {
            if let target, retryAfterUntil > target {
                let error = lastFailure ?? DeliveryError(.transient, "the collector asked to retry later (Retry-After)")
                return FlushResult(sent: sentBefore, remaining: pendingEvents, outcome: .failed(error))
            }
            try? await time.sleepUntil(retryAfterUntil)
        }
        retryTask?.cancel()
        retryTask = nil
        // Records still in the writer's buffer become readable (and durable) first.
        let log = self.log
        if log.configuration.access == .readWrite {
            try? await onIO { try log.sync() }
        }
        // Shutdown may have begun, or this flush been cancelled, while it slept or synced.
        if stopped && !shuttingDown {
            return FlushResult(sent: sentBefore, remaining: pendingEvents, outcome: .deadlineReached)
        }
        if Task.isCancelled {
            return FlushResult(sent: sentBefore, remaining: pendingEvents, outcome: .deadlineReached)
        }
        var sent = sentBefore
        // The failure being retried: a deadline that ends its retries, with nothing delivered
        // since, reports it (why the events are still pending) rather than the deadline.
        var retrying: DeliveryError?
        while true {
            let task = Task {
                let pass = await self.drain(deadline: target)
                self.passFinished(pass)
                return pass
            }
            drainTask = task
            let pass = await task.value
            sent += pass.sent
            if pass.sent > 0 { retrying = nil }
            switch pass.outcome {
            case .drained: return FlushResult(sent: sent, remaining: pendingEvents, outcome: .drained)
            case .noData: return FlushResult(sent: sent, remaining: pendingEvents, outcome: sent > 0 ? .drained : .noData)
            case .deadline: return FlushResult(sent: sent, remaining: pendingEvents, outcome: retrying.map { .failed($0) } ?? .deadlineReached)
            case .failed(let failure):
                retrying = failure.error
                // Transient failures are retried after the backoff while a request may still start.
                guard failure.error.code == .transient, !Task.isCancelled,
                      let retryAt = DeliveryTiming.flushRetry(at: notBefore, deadline: target, requestTimeout: configuration.requestTimeout, lastRequestDuration: lastRequestDuration)
                else {
                    return FlushResult(sent: sent, remaining: pendingEvents, outcome: .failed(failure.error))
                }
                retryTask?.cancel()
                retryTask = nil
                do { try await time.sleepUntil(retryAt) } catch {
                    return FlushResult(sent: sent, remaining: pendingEvents, outcome: .failed(failure.error))
                }
                if (stopped && !shuttingDown) || Task.isCancelled {
                    return FlushResult(sent: sent, remaining: pendingEvents, outcome: .failed(failure.error))
                }
            }
        }
    }

    /// The task's value, or nil if the monotonic clock reaches `target` first.
    func value<T: Sendable>(of task: Task<T, Never>, until target: Duration?) async -> T? {
        guard let target else { return await task.value }
        let time = self.time
        return await withCheckedContinuation { (continuation: CheckedContinuation<T?, Never>) in
            let once = ResumeOnce(continuation)
            let sleeper = Task {
                try? await time.sleepUntil(target)
                once.resume(returning: nil)
            }
            Task {
                let value = await task.value
                once.resume(returning: value)
                sleeper.cancel()
            }
        }
    }

    /// Bookkeeping after a pass: schedules the retry after a failure, re-arms the count trigger.
    func passFinished(_ pass: Pass) {
        drainTask = nil
        switch pass.outcome {
        case .drained, .noData:
            // Events that became readable after the pass's last read were announced while it was
            // armed: count them now, and go again if they reach the bulk size.
            let pending = pendingEvents
            let again = pending >= UInt64(configuration.flushBulkSize) && kick()
            trigger.withLock { $0.unsent = Int(clamping: pending); $0.armed = again }
        case .deadline:
            trigger.withLock { $0.armed = false }
        case .failed(let failure):
            trigger.withLock { $0.armed = true }
            scheduleRetry(failure)
        }
    }

    /// Sets when the next attempt may start after a failed pass (the backoff, or the collector's
    /// `Retry-After`) and, unless stopped, wakes a background pass then.
    func scheduleRetry(_ failure: Failure) {
        failedPasses += 1
        let delay = DeliveryTiming.wait(afterFailedPasses: failedPasses, retryAfter: failure.retryAfter, backoff: configuration.backoff)
        let now = time.now()
        if failure.retryAfter != nil { retryAfterUntil = now + delay }
        notBefore = now + delay
        guard !stopped else { return }
        let target = notBefore
        retryTask?.cancel()
        retryTask = Task { [time] in
            do { try await time.sleepUntil(target) } catch { return }
            self.retryTask = nil
            self.kick()
        }
    }

    // MARK: Stats

    /// Counters and state; `pendingEvents` is read from the log.
    public var stats: DeliveryStats {
        var stats = counters
        stats.pendingEvents = pendingEvents
        stats.droppedEvents = quotaDrops.count(log)
        return stats
    }

    nonisolated var pendingEvents: UInt64 { log.stats.pendingRecords }

}
