import BeaconLog
import Dispatch
import Foundation
import Glibc
import Synchronization

/// The tracker's delivery side: the uploader, and the termination handler's signal sources.
final class DeliveryState: Sendable {
    /// Nil when the tracker has no ``Beacon/Configuration/delivery`` (events stay on disk).
    let uploader: Uploader?
    let time: MonotonicTime
    let signalSources = Mutex<SignalSources?>(nil)

    /// The installed signal sources, kept alive for the process's lifetime. Dispatch sources are
    /// thread-safe but not marked `Sendable`.
    final class SignalSources: @unchecked Sendable {
        let sources: [any DispatchSourceSignal]
        init(_ sources: [any DispatchSourceSignal]) { self.sources = sources }
    }

    init(configuration: Beacon.Configuration, log: BeaconLog) throws {
        time = MonotonicTime(configuration.monotonicClock)
        guard let delivery = configuration.delivery, configuration.storage.access == .readWrite else {
            uploader = nil
            return
        }
        uploader = try Uploader(
            log: log, configuration: delivery, transport: configuration.transport,
            clock: configuration.monotonicClock, now: configuration.wallClock,
            diagnostics: configuration.diagnostics)
    }
}

extension Beacon.Configuration {
    /// Throws what is wrong with this configuration, before anything is opened.
    func validate() throws {
        guard storage.access == .readWrite || storage.access == .write else {
            throw BeaconLogError(.invalidArgument, "a tracker appends: storage.access is \(storage.access); use .readWrite (append and deliver) or .write (append only)", path: directory)
        }
        try delivery?.validate()
    }
}

extension Beacon {
    /// The writer's append hook when the tracker delivers: the count trigger, and the start of the
    /// delivery loop, so that a tracker nobody runs delivers (by count, interval and backoff).
    ///
    /// `init` starts no task. The writer thread calls this after each commit, and once as it
    /// starts when earlier runs left events pending; the first call starts the uploader's loop in
    /// a task the uploader keeps (``Uploader/start()``), unless a ``run()`` already delivers in
    /// its caller's task. Every ending stops the loop, and ``shutdown(timeout:)`` joins it.
    static func deliveryTrigger(_ uploader: Uploader) -> @Sendable (UInt64) -> Void {
        let started = Flag()
        return { pending in
            if !started.value.load(ordering: .relaxed), !started.value.exchange(true, ordering: .relaxed) { uploader.start() }
            uploader.recordsPending(pending)
        }
    }

    /// A flag a closure can keep (an `Atomic` cannot be captured).
    final class Flag: Sendable {
        let value = Atomic<Bool>(false)
    }

    /// Delivers every event tracked so far, now.
    ///
    /// Waits until the events tracked before the call are in the log, then uploads until nothing
    /// is pending, a request fails (the events stay stored and are retried with backoff), or the
    /// deadline. Concurrent callers share one flush.
    ///
    /// ```swift
    /// let result = await beacon.flush(timeout: .seconds(2))
    /// ```
    /// - Parameter timeout: how long from now the flush may take; nil for no limit (each request
    ///   still has the request timeout). No request is started that cannot finish before it.
    public func flush(timeout: Duration? = nil) async -> FlushResult {
        guard let uploader = delivery.uploader else { return noDelivery() }
        await BlockingQueue.run { [writer] in writer.waitUntilWritten() }
        return reportingLosses(await uploader.flush(timeout: timeout))
    }

    /// Counters and state of delivery (all zero without a ``Configuration/delivery``): a
    /// synchronous read of a snapshot, like ``stats``.
    public var deliveryStats: DeliveryStats {
        guard let uploader = delivery.uploader else {
            var stats = DeliveryStats()
            stats.pendingEvents = log.stats.pendingRecords
            stats.droppedEvents = quotaDrops.count(log)
            return stats
        }
        return uploader.stats
    }

    /// On SIGTERM or SIGINT, shuts the tracker down with `grace` as the deadline (so the last
    /// batch can go out), then calls `next` with the signal and the shutdown's report. The library
    /// never ends the process: `next` decides (exit, stop a server, or nothing). Opt-in; installing
    /// it again does nothing.
    ///
    /// The signals' default action is ignored (`signal(SIG_IGN)`) and they are watched with
    /// `DispatchSource.makeSignalSource`; the handler keeps the tracker alive. Every signal
    /// (a second Ctrl-C too) calls `next` once the one shutdown has ended.
    ///
    /// For a program without a lifecycle of its own. Do not combine it with a service group
    /// (swift-service-lifecycle), Vapor or Hummingbird: they handle the signals and stop services
    /// in order; run the tracker as one of their services instead (the Getting started article: "Running in a service").
    ///
    /// ```swift
    /// beacon.installTerminationHandler { signal, report in
    ///     exit(128 + signal)
    /// }
    /// ```
    /// - Parameters:
    ///   - grace: the shutdown's deadline (nil: ``Configuration/shutdownGrace``).
    ///   - next: what the program does once the tracker is closed, called on a background thread.
    public func installTerminationHandler(grace: Duration? = nil, then next: @escaping @Sendable (_ signal: Int32, _ report: FlushResult) -> Void) {
        let installed = delivery.signalSources.withLock { $0 != nil }
        guard !installed else { return }
        let deadline = grace ?? configuration.shutdownGrace
        var sources: [any DispatchSourceSignal] = []
        for signo in [SIGTERM, SIGINT] {
            signal(signo, SIG_IGN)
            // The one dispatch queue left in Beacon (Architecture's "Threads"): a signal source
            // watches the signal without a thread of Beacon's, and its handler only starts a task.
            let source = DispatchSource.makeSignalSource(signal: signo, queue: .global())
            source.setEventHandler { [self] in
                // Started by the signal the user asked to handle (this handler is opt-in): the
                // shutdown is async and the dispatch handler is not.
                Task {
                    let report = await self.shutdown(timeout: deadline)
                    next(signo, report)
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
        return reportingLosses(FlushResult(sent: 0, remaining: pending, outcome: .failed(DeliveryError(.configuration, "the tracker has no collector (Configuration.delivery is nil, or the log was opened with .write access), so \(pending) events stay on disk; set Configuration.delivery (or serverURL when creating the configuration) or run `beacon send` on the directory"))))
    }

    func pendingOnDisk() -> UInt64 {
        log.stats.pendingRecords
    }

}
