import Dispatch
import Foundation
import Synchronization

/// Delivers a log's events to a collector, in order, one request at a time.
///
/// The uploader reads contiguous batches from the log's checkpoint, sends each through a
/// ``Transport`` and acknowledges it when the collector answers 2xx, so the checkpoint advances
/// durably. Other answers follow DESIGN §5: transient failures are retried with exponential
/// backoff and full jitter on a monotonic clock (honouring `Retry-After`); 413 splits the batch;
/// 400 and 422 bisect to the refused events, which go to `rejected.jsonl`; 401, 403, 404 and
/// other 4xx pause delivery with backoff and are reported, dropping nothing.
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
/// Requests carry `Content-Type`, `User-Agent: beacon-swift/<version>`, `X-Beacon-Sent-At`
/// (epoch ms, per attempt), `Idempotency-Key` (the same for the same events, across retries and
/// restarts: the range in flight is kept in `delivery.inflight`), `X-Beacon-Retry` (0 for the
/// first attempt) and the configured headers.
public actor Uploader {
    /// The library version sent in `User-Agent`.
    public static let version = "1.0.0"

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
    let ioQueue = DispatchQueue(label: "beacon.uploader.io")
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
    /// The range of the request in flight (or last sent), so a retry re-sends the same events.
    var inflight: InflightFile.Range?
    var inflightLoaded = false
    var inflightFromEarlierRun = false
    var savedInflight: InflightFile.Range?
    /// The seqs this uploader wrote to `rejected.jsonl` (expired or refused) that the checkpoint
    /// has not passed yet: a batch read again after a failed send must not set the same events
    /// aside twice. A set, not a high-water mark: an expired event set aside first must not hide a
    /// refused event before it in the same batch.
    var setAside: Set<UInt64> = []
    var lastKey: String?
    var lastAttempt = 0
    var lastRequestDuration: Duration = .zero
    var started = false
    var stopped = false
    /// Flush calls that joined a flush already running (for tests).
    var sharedFlushJoins = 0

    /// An uploader for `log`, sending with `transport` (default ``HTTPTransport``).
    ///
    /// - Parameters:
    ///   - log: an open log holding the reader lock (access `.readWrite` or `.read`).
    ///   - configuration: where and how to send.
    ///   - transport: how requests are sent; tests pass an in-memory one.
    ///   - clock: the monotonic clock for backoff, intervals and deadlines.
    ///   - now: the wall clock, for `X-Beacon-Sent-At`, clock skew and event expiry.
    ///   - diagnostics: where loud reports go (paused delivery); standard error by default.
    public init(
        log: BeaconLog,
        configuration: DeliveryConfiguration,
        transport: any Transport = HTTPTransport(),
        clock: any Clock<Duration> = ContinuousClock(),
        now: @escaping @Sendable () -> Date = { Date() },
        diagnostics: @escaping @Sendable (String) -> Void = { FileHandle.standardError.write(Data(("beacon: " + $0 + "\n").utf8)) }
    ) {
        precondition(configuration.batchSize > 0, "batchSize must be positive")
        precondition(configuration.maxBatchBytes > 0, "maxBatchBytes must be positive")
        precondition(configuration.flushBulkSize > 0, "flushBulkSize must be positive")
        self.log = log
        self.configuration = configuration
        self.transport = transport
        self.time = MonotonicTime(clock)
        self.wallClock = now
        self.diagnostics = diagnostics
        self.rejectedFile = RejectedFile(directory: log.configuration.directory, fileSystem: log.configuration.fileSystem)
        self.inflightFile = InflightFile(directory: log.configuration.directory, fileSystem: log.configuration.fileSystem)
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
    func kick() {
        guard started, !stopped, drainTask == nil, flushTask == nil, time.now() >= notBefore else { return }
        drainTask = Task {
            let pass = await self.drain(deadline: nil)
            self.passFinished(pass)
            return pass
        }
    }

    // MARK: Flush and shutdown

    /// Sends every pending event now, stopping at the first failure or at the deadline.
    ///
    /// When the log is opened `.readWrite` in this process, the records still in its write buffer
    /// are written and fsynced first (`sync()`), so the flush covers everything appended before it.
    ///
    /// A flush does not wait for a pending backoff (it tries at once), but it honours a
    /// collector's `Retry-After`: if that ends after the deadline the flush fails at once. It does
    /// not start a request that cannot finish before the deadline. Concurrent callers share one
    /// flush and get the same result.
    ///
    /// - Parameter deadline: how long from now the flush may take; nil for no limit (each request
    ///   still has `requestTimeout`).
    public func flush(deadline: Duration? = nil) async -> FlushResult {
        if let running = flushTask {
            sharedFlushJoins += 1
            return await running.value
        }
        let target = deadline.map { time.now() + $0 }
        let task = Task { await self.runFlush(until: target, shuttingDown: false) }
        flushTask = task
        let result = await task.value
        flushTask = nil
        return result
    }

    /// Stops the triggers, then delivers what is pending until drained, failed, or the deadline;
    /// a request still running at the deadline is cancelled (its events stay pending and are sent
    /// again, with the same idempotency key, after the next start). Further flushes do nothing.
    ///
    /// - Parameter deadline: how long from now shutdown may take; nil for no limit.
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
                return FlushResult(sent: 0, remaining: pendingEvents, outcome: .deadlineReached)
            }
        }
        return await runFlush(until: target, shuttingDown: true)
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
        let task = Task {
            let pass = await self.drain(deadline: target)
            self.passFinished(pass)
            return pass
        }
        drainTask = task
        let pass = await task.value
        let outcome: FlushResult.Outcome
        switch pass.outcome {
        case .drained: outcome = .drained
        case .noData: outcome = sentBefore > 0 ? .drained : .noData
        case .deadline: outcome = .deadlineReached
        case .failed(let failure): outcome = .failed(failure.error)
        }
        return FlushResult(sent: sentBefore + pass.sent, remaining: pendingEvents, outcome: outcome)
    }

    /// The task's value, or nil if the monotonic clock reaches `target` first.
    func value<T: Sendable>(of task: Task<T, Never>, until target: Duration?) async -> T? {
        guard let target else { return await task.value }
        let time = self.time
        return await withCheckedContinuation { (continuation: CheckedContinuation<T?, Never>) in
            let once = ResumeOnce(continuation)
            let sleeper = Task {
                try? await time.sleepUntil(target)
                once.resume(nil)
            }
            Task {
                let value = await task.value
                once.resume(value)
                sleeper.cancel()
            }
        }
    }

    /// Bookkeeping after a pass: schedules the retry after a failure, re-arms the count trigger.
    func passFinished(_ pass: Pass) {
        drainTask = nil
        switch pass.outcome {
        case .drained, .noData:
            trigger.withLock { $0.unsent = 0; $0.armed = false }
        case .deadline:
            trigger.withLock { $0.armed = false }
        case .failed(let failure):
            trigger.withLock { $0.armed = true }
            scheduleRetry(failure)
        }
    }

    func scheduleRetry(_ failure: Failure) {
        guard !stopped else { return }
        let failures = max(1, counters.consecutiveFailures)
        var delay = configuration.backoff.delay(afterFailures: failures)
        let now = time.now()
        if let retryAfter = failure.retryAfter {
            delay = min(retryAfter, .seconds(86_400))
            retryAfterUntil = now + delay
        }
        notBefore = now + delay
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
        return stats
    }

    nonisolated var pendingEvents: UInt64 { log.stats.pendingRecords }

    // MARK: The pass

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

    /// Sends batch after batch until the log is empty, a request fails, or the deadline.
    func drain(deadline: Duration?) async -> Pass {
        var sent = 0
        var sawData = false
        while true {
            if Task.isCancelled { return Pass(sent: sent, outcome: .deadline) }
            let batch: LogBatch
            let fromEarlierRun: Bool
            do {
                (batch, fromEarlierRun) = try await readNext()
            } catch {
                return Pass(sent: sent, outcome: .failed(storageFailure(error, doing: "reading the log")))
            }
            if batch.isEmpty { return Pass(sent: sent, outcome: sawData ? .drained : .noData) }
            sawData = true
            let (delivered, outcome) = await deliver(batch, retryOfEarlierRun: fromEarlierRun, deadline: deadline)
            sent += delivered
            if let outcome { return Pass(sent: sent, outcome: outcome) }
        }
    }

    func storageFailure(_ error: any Error, doing what: String) -> Failure {
        let failure = Failure(error: error as? DeliveryError ?? DeliveryError(.storage, "\(what) failed: \(error)"))
        counters.lastError = failure.error.message
        lastFailure = failure.error
        return failure
    }

    /// The next batch: the range in flight when the checkpoint is still at its start (the same
    /// events again), else up to `batchSize` events from the checkpoint.
    func readNext() async throws -> (LogBatch, Bool) {
        if !inflightLoaded {
            inflightLoaded = true
            inflight = inflightFile.load()
            inflightFromEarlierRun = inflight != nil
            savedInflight = inflight
        }
        let log = self.log
        let checkpoint = log.checkpoint
        if let range = inflight, range.firstSeq == checkpoint.seq {
            let fromEarlierRun = inflightFromEarlierRun
            inflightFromEarlierRun = false
            let batch = try await onIO { try log.read(maxRecords: range.count, maxBytes: Int.max) }
            return (batch, fromEarlierRun)
        }
        inflightFromEarlierRun = false
        let (count, bytes) = (configuration.batchSize, configuration.maxBatchBytes)
        return (try await onIO { try log.read(maxRecords: count, maxBytes: bytes) }, false)
    }

    func onIO<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            ioQueue.async { continuation.resume(with: Result { try body() }) }
        }
    }

    var nowMillis: Int64 { Int64((wallClock().timeIntervalSince1970 * 1000).rounded(.down)) }

    /// Sends one batch, splitting and bisecting as the collector asks. Returns the events
    /// accepted and, unless the whole batch was acknowledged, why it stopped.
    func deliver(_ batch: LogBatch, retryOfEarlierRun: Bool, deadline: Duration?) async -> (Int, PassOutcome?) {
        let log = self.log
        let acknowledged = log.checkpoint.seq
        setAside = setAside.filter { $0 >= acknowledged }
        // Events past maxEventAge are set aside first.
        var sendable = Array(batch.records.indices)
        if let maxAge = configuration.maxEventAge {
            let cutoff = nowMillis - Int64(maxAge.components.seconds * 1000 + maxAge.components.attoseconds / 1_000_000_000_000_000)
            var expired: [RejectedFile.Entry] = []
            sendable.removeAll { i in
                guard let t = EventTime.millis(in: batch.records[i]), t < cutoff else { return false }
                expired.append(.init(status: nil, reason: "expired", seq: batch.seqs[i], record: batch.records[i]))
                return true
            }
            // Those set aside by an earlier attempt at this batch are already in rejected.jsonl.
            expired.removeAll { setAside.contains($0.seq) }
            if !expired.isEmpty {
                let file = rejectedFile, now = nowMillis, entries = expired
                do {
                    try await onIO { try file.append(entries, nowMillis: now) }
                } catch {
                    return (0, .failed(storageFailure(error, doing: "setting aside expired events")))
                }
                counters.expiredEvents += UInt64(expired.count)
                setAside.formUnion(expired.map(\.seq))
            }
        }
        if sendable.isEmpty {
            do {
                try await onIO { try log.acknowledge(through: batch.end) }
                return (0, nil)
            } catch {
                return (0, .failed(storageFailure(error, doing: "acknowledging expired events")))
            }
        }
        var sent = 0
        var queue: [Range<Int>] = [0..<sendable.count]
        var ackedThrough = -1  // index in `batch` of the last acknowledged record
        var firstRequest = true
        while let range = queue.first {
            if Task.isCancelled { return (sent, .deadline) }
            var timeout = configuration.requestTimeout
            if let deadline {
                let remaining = deadline - time.now()
                if remaining <= max(.milliseconds(1), lastRequestDuration) { return (sent, .deadline) }
                timeout = min(timeout, remaining)
            }
            let isLast = range.upperBound == sendable.count
            let lastIndex = sendable[range.upperBound - 1]
            let end = isLast ? batch.end : batch.end(after: lastIndex)
            let startSeq = ackedThrough < 0 ? batch.start.seq : batch.end(after: ackedThrough).seq
            let span = InflightFile.Range(firstSeq: startSeq, count: (isLast ? batch.count - 1 : lastIndex) - ackedThrough)
            inflight = span
            if savedInflight != span {
                let file = inflightFile
                do {
                    try await onIO { try file.save(span) }
                    savedInflight = span
                } catch {
                    return (sent, .failed(storageFailure(error, doing: "recording the batch in flight")))
                }
            }
            let indices = sendable[range]
            let records = indices.map { batch.records[$0] }
            let seqs = indices.map { batch.seqs[$0] }
            let answer = await send(records: records, seqs: seqs, timeout: timeout, knownRetry: firstRequest && retryOfEarlierRun)
            firstRequest = false
            switch answer {
            case .failure(let error):
                if error.kind == .cancelled || (Task.isCancelled) { return (sent, .deadline) }
                if error.kind == .timeout, let deadline, time.now() >= deadline - .milliseconds(1), timeout < configuration.requestTimeout {
                    return (sent, .deadline)
                }
                return (sent, .failed(fail(DeliveryError(.transient, "sending \(records.count) events to \(configuration.url) failed: \(error.message); they stay stored and are retried"), retryAfter: nil)))
            case .success(let response):
                let action = StatusAction(status: response.status)
                switch action {
                case .acknowledge:
                    do {
                        try await onIO { try log.acknowledge(through: end) }
                    } catch {
                        return (sent, .failed(storageFailure(error, doing: "acknowledging delivered events")))
                    }
                    ackedThrough = isLast ? batch.count - 1 : lastIndex
                    sent += records.count
                    counters.sentEvents += UInt64(records.count)
                    queue.removeFirst()
                    if counters.paused != nil { diagnostics("delivery to \(configuration.url) resumed") }
                    counters.consecutiveFailures = 0
                    counters.paused = nil
                    counters.lastError = nil
                    lastFailure = nil
                case .split, .bisect:
                    if range.count > 1 {
                        counters.splits += 1
                        let middle = range.lowerBound + range.count / 2
                        queue.replaceSubrange(0..<1, with: [range.lowerBound..<middle, middle..<range.upperBound])
                        continue
                    }
                    // One event the collector refuses: set it aside, acknowledge it, go on.
                    let reason = action == .split ? "too large for the collector (413)" : Self.reason(from: response)
                    let entry = RejectedFile.Entry(status: response.status, reason: reason, seq: seqs[0], record: records[0])
                    let file = rejectedFile, now = nowMillis
                    let already = setAside.contains(seqs[0])
                    do {
                        if !already {
                            try await onIO { try file.append([entry], nowMillis: now) }
                            setAside.insert(seqs[0])
                            counters.rejectedEvents += 1
                        }
                        try await onIO { try log.acknowledge(through: end) }
                    } catch {
                        return (sent, .failed(storageFailure(error, doing: "setting aside a refused event")))
                    }
                    ackedThrough = isLast ? batch.count - 1 : lastIndex
                    queue.removeFirst()
                case .retry:
                    let retryAfter = response.header("Retry-After").flatMap { HTTPDate.retryAfter($0, nowMillis: nowMillis) }
                    return (sent, .failed(fail(DeliveryError(.transient, "\(configuration.url) answered \(response.status) for \(records.count) events; they stay stored and are retried\(retryAfter.map { " after \($0) (Retry-After)" } ?? " with backoff")", status: response.status), retryAfter: retryAfter)))
                case .pause:
                    let retryAfter = response.header("Retry-After").flatMap { HTTPDate.retryAfter($0, nowMillis: nowMillis) }
                    let message = "\(configuration.url) answered \(response.status)\(Self.hint(response.status)); delivery is paused with backoff and every event is kept (\(pendingEvents) pending). Fix the collector URL or credentials"
                    if counters.paused == nil || counters.lastStatus != response.status { diagnostics(message) }
                    counters.paused = "HTTP \(response.status)"
                    counters.lastStatus = response.status
                    return (sent, .failed(fail(DeliveryError(.configuration, message, status: response.status), retryAfter: retryAfter)))
                }
            }
        }
        return (sent, nil)
    }

    static func hint(_ status: Int) -> String {
        switch status {
        case 401: " (unauthorized: check the Authorization header)"
        case 403: " (forbidden: check the credentials' permissions)"
        case 404: " (not found: check the collector URL)"
        default: ""
        }
    }

    /// The reason recorded for a refused event: the status and the start of the collector's answer.
    static func reason(from response: TransportResponse) -> String {
        let text = String(decoding: response.body.prefix(300), as: UTF8.self)
        return text.isEmpty ? "HTTP \(response.status)" : "HTTP \(response.status): \(text)"
    }

    func fail(_ error: DeliveryError, retryAfter: Duration?) -> Failure {
        counters.failedRequests += 1
        counters.consecutiveFailures += 1
        counters.lastError = error.message
        lastFailure = error
        return Failure(error: error, retryAfter: retryAfter)
    }

    /// Builds and sends one request. Headers are never logged.
    func send(records: [ArraySlice<UInt8>], seqs: [UInt64], timeout: Duration, knownRetry: Bool) async -> Result<TransportResponse, TransportError> {
        let key = IdempotencyKey.make(records: records, seqs: seqs)
        if key == lastKey {
            lastAttempt += 1
        } else {
            lastKey = key
            lastAttempt = knownRetry ? 1 : 0
        }
        if lastAttempt > 0 { counters.retries += 1 }
        let sentAt = nowMillis
        var body = configuration.format.body(records, sentAt: sentAt)
        var headers: [(name: String, value: String)] = [
            ("Content-Type", configuration.format.contentType),
            ("User-Agent", "beacon-swift/\(Self.version)"),
            ("X-Beacon-Sent-At", String(sentAt)),
            ("Idempotency-Key", key),
            ("X-Beacon-Retry", String(lastAttempt)),
        ]
        if configuration.gzip {
            body = Gzip.compress(body)
            headers.append(("Content-Encoding", "gzip"))
        }
        for (name, value) in configuration.headers.sorted(by: { $0.key < $1.key }) { headers.append((name, value)) }
        let request = TransportRequest(url: configuration.url, headers: headers, body: body, timeout: timeout)
        let started = time.now()
        let result: Result<TransportResponse, TransportError>
        do {
            result = .success(try await transport.send(request))
        } catch let error as TransportError {
            result = .failure(error)
        } catch is CancellationError {
            result = .failure(TransportError(.cancelled, "the request was cancelled"))
        } catch {
            result = .failure(TransportError(.network, "\(error)"))
        }
        let elapsed = time.now() - started
        let receivedAt = nowMillis
        if case .success(let response) = result {
            counters.lastStatus = response.status
            if (200...299).contains(response.status) {
                counters.sentRequests += 1
                counters.sentBytes += UInt64(body.count)
                lastRequestDuration = elapsed
            }
            if let date = response.header("Date"), let seconds = HTTPDate.parse(date) {
                let midpoint = sentAt + (receivedAt - sentAt) / 2
                counters.clockSkew = .milliseconds(seconds * 1000 + 500 - midpoint)
            }
        }
        return result
    }
}

/// A continuation resumed by whichever comes first.
final class ResumeOnce<T: Sendable>: Sendable {
    private let continuation: Mutex<CheckedContinuation<T, Never>?>

    init(_ continuation: CheckedContinuation<T, Never>) {
        self.continuation = Mutex(continuation)
    }

    /// Resumes outside the lock (see `Once` in HTTPTransport.swift: resuming under it can deadlock
    /// against a task cancellation that calls back here).
    func resume(_ value: T) {
        let pending = continuation.withLock { c in
            defer { c = nil }
            return c
        }
        pending?.resume(returning: value)
    }
}
