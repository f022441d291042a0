import BeaconLog
import Dispatch
import Foundation
import Synchronization

/// Delivers a log's events to a collector, in order, with a window of requests in flight.
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
/// While batches go through, up to ``DeliveryConfiguration/maxRequestsInFlight`` requests are
/// pipelined on one connection (`RequestWindow` adapts how many; Uploader+Window.swift); a
/// failure is handled one request at a time.
///
/// The decisions are `DeliveryStateMachine`'s (one batch), `RequestWindow`'s (how many in
/// flight), `DeliveryTiming`'s (deadlines, backoff) and `UploaderScheduler`'s (when a pass runs,
/// and who runs it); this actor does the
/// I/O: it reads the log, sends through the transport, writes `rejected.jsonl` and
/// `delivery.inflight`, acknowledges, and sleeps.
///
/// Background passes run in one delivery loop, ``run(shutdownGrace:)``, which the owner runs in a
/// task of its own and cancels to shut the uploader down, as a service's `run()` (or ``start()``
/// runs it in a task the uploader keeps and ``shutdown(timeout:)`` joins).
/// A pass starts when `flushBulkSize` events are pending (``recordsAppended(_:)``), every
/// `flushInterval`, when the loop starts (events left by earlier runs) and after a backoff.
/// ``flush(timeout:)`` and ``shutdown(timeout:)`` run in their caller's task. Nothing runs while
/// idle except the loop's one sleep.
///
/// ```swift
/// let log = try BeaconLog(directory: "/var/lib/app/events")
/// let uploader = Uploader(log: log, configuration: .init(url: URL(string: "https://c.example/e")!))
/// let result = await uploader.flush()
/// ```
///
/// Requests are built by `RequestBuilder`: `Idempotency-Key` is the same for the same events,
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
    /// Reports a sentence, with the failure behind it (nil when delivery resumed).
    let diagnostics: @Sendable (String, DeliveryError?) -> Void
    /// The diagnostics handler itself, for reports with a subject and severity of their own.
    let report: @Sendable (BeaconDiagnostic) -> Void
    /// Masks the configured credentials out of answers and transport messages.
    let credentials: CredentialScrubber
    let rejectedFile: RejectedFile
    let inflightFile: InflightFile
    let requests: RequestBuilder
    /// Pending events the log's quota deleted since the uploader started (see `reportingLosses`).
    let quotaDrops = QuotaDrops()
    /// The log's reads, the batch read ahead and the acknowledgements (checkpoint writes, fsync)
    /// run here, one at a time, in the order they were started.
    let ioQueue = BlockingQueue(label: "beacon.uploader.io")
    /// The thread passes, flushes and drains run on (their task's executor): the send loop, the
    /// log's reads and the default transport's socket calls, without a thread hand-off per request.
    nonisolated let passThread = IOThread(name: "beacon-uploader")
    /// Where the delivery loop's probes block while it backs off (``probeCollector()``), one at a
    /// time on Beacon's pool threads: a probe takes at most a second, and never holds up a flush
    /// on ``passThread``.
    nonisolated let probeLane = SerialLane(pool: .network)
    /// The scheduling (`UploaderScheduler`) and what carries it out, shared with the append
    /// hook's thread and with `stop()`.
    nonisolated let scheduling: Mutex<Scheduling>

    /// The scheduling state machine, and the handles its actions reach.
    struct Scheduling: Sendable {
        var machine: UploaderScheduler
        /// Wakes the delivery loop that drives background passes.
        var wakeup: Wakeup?
        /// Cancels the pass, flush or drain that runs.
        var cancel: Cancel?
        /// The loop ``Uploader/start()`` runs, joined by shutdown.
        var backgroundLoop: Task<Void, Never>?
        /// A flush waiting for the background pass to end: resumed with true to run, false when
        /// refused (shut down or stopped meanwhile).
        var queuedFlush: CheckedContinuation<Bool, Never>?
        /// The shutdown waiting for the running pass or flush to end (``UploaderScheduler/PassAction/resumeShutdown``).
        var shutdownWaiter: CheckedContinuation<Void, Never>?
        var lastCancelId: UInt64 = 0
        /// The probe the loop runs while backing off (``Uploader/probeCollector()``).
        var probe: ProbeCancellation?
    }

    /// Cancels one pass, flush or drain (``Uploader/cancellable(shielded:_:)``).
    struct Cancel: Sendable {
        let id: UInt64
        let cancel: @Sendable () -> Void
    }

    /// What ``stats`` and ``metrics`` read without waiting for the actor (whose pass may wait for
    /// as long as a request takes, or the disk stalls the checkpoint's fdatasync): the counters
    /// and the observations live here, the window's limit is copied here whenever it changes.
    /// Only the actor writes it.
    nonisolated let published: Mutex<Published>

    struct Published: Sendable {
        var counters = DeliveryStats()
        /// Answers by class, request durations, requests in flight, pauses (Uploader+Metrics.swift).
        var observed = DeliveryObservations()
        var requestWindow: Int
    }

    /// The counters. The actor owns them; each change is copied to ``published`` (one lock per
    /// change, none to read them here), so that ``stats`` is a synchronous read.
    var counters = DeliveryStats() {
        didSet {
            let counters = self.counters
            published.withLock { $0.counters = counters }
        }
    }
    /// The window of requests in flight, adapted to the collector (Uploader+Window.swift).
    var window: RequestWindow {
        didSet {
            let limit = window.effectiveLimit
            published.withLock { $0.requestWindow = limit }
        }
    }
    /// Callers waiting for the result of the flush that runs or is queued.
    var flushJoiners: [CheckedContinuation<FlushResult, Never>] = []
    /// Callers waiting for the result of the shutdown that runs, and that result once there.
    var shutdownJoiners: [CheckedContinuation<FlushResult, Never>] = []
    var shutdownResult: FlushResult?
    /// Events the last background pass delivered (a flush or shutdown that waited for it counts them).
    var lastLoopPassSent = 0
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
    /// Whether ``setAside`` holds what an earlier process set aside past the checkpoint
    /// (``learnEarlierSetAside()``).
    var earlierSetAsideLoaded = false
    var lastRequestDuration: Duration = .zero
    /// The last `Date` header a collector sent, parsed.
    var lastCollectorDate: (text: String, seconds: Int64)?
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
    ///   - diagnostics: where loud reports go (paused delivery, events set aside, storage
    ///     failures), each with its ``BeaconDiagnostic/deliveryError``; silent by default.
    public init(
        log: BeaconLog,
        configuration: DeliveryConfiguration,
        transport: (any Transport)? = nil,
        clock: any Clock<Duration> = ContinuousClock(),
        now: @escaping @Sendable () -> Date = { Date() },
        diagnostics: @escaping @Sendable (BeaconDiagnostic) -> Void = { _ in }
    ) throws {
        try configuration.validate()
        self.log = log
        self.configuration = configuration
        self.transport = transport ?? Self.defaultTransport(for: configuration.url)
        self.time = MonotonicTime(clock)
        self.wallClock = now
        self.diagnostics = { diagnostics(BeaconDiagnostic(kind: .delivery, deliveryError: $1, message: $0)) }
        self.report = diagnostics
        self.credentials = CredentialScrubber(configuration: configuration)
        self.rejectedFile = RejectedFile(directory: log.directory, fileSystem: log.configuration.fileSystem)
        self.inflightFile = InflightFile(directory: log.directory, fileSystem: log.configuration.fileSystem)
        self.requests = RequestBuilder(configuration: configuration)
        let window = RequestWindow(maximum: configuration.maxRequestsInFlight)
        self.window = window
        self.published = Mutex(Published(requestWindow: window.effectiveLimit))
        self.scheduling = Mutex(Scheduling(machine: UploaderScheduler(bulkSize: configuration.flushBulkSize, interval: configuration.effectiveFlushInterval)))
        quotaDrops.opened(log)
    }

    /// Released while ``start()``'s loop sleeps (the loop does not keep it): wakes the loop, which
    /// finds it gone and ends.
    deinit {
        scheduling.withLock { $0.wakeup }?.signal()
    }

    // MARK: Stats

    /// Counters and state, read at once from any thread (a snapshot the uploader keeps up to
    /// date, as ``Beacon/stats`` is; it never waits for a request or the disk); `pendingEvents` is
    /// read from the log.
    public nonisolated var stats: DeliveryStats {
        var stats = published.withLock { p in
            var stats = p.counters
            stats.requestsInFlight = p.observed.requestsInFlight
            stats.requestWindow = p.requestWindow
            return stats
        }
        stats.pendingEvents = pendingEvents
        stats.droppedEvents = quotaDrops.count(log)
        return stats
    }

    nonisolated var pendingEvents: UInt64 { log.stats.pendingRecords }

    /// Pending events as the directory holds them now, for the diagnostics: a reader beside a
    /// writer in another process (`beacon send --follow`) knows only what it has read, so it looks
    /// (``BeaconLog/pendingOnDisk()``, a listing and a few `pread`s); a writing log knows.
    nonisolated var pendingOnDisk: UInt64 { log.pendingOnDisk()?.records ?? log.stats.pendingRecords }

}
