import BeaconLog
import Foundation

extension Beacon {
    /// What `track` does when the in-memory hand-off to the writer is full (the disk has fallen
    /// behind by ``Configuration/handoffBytes``).
    ///
    /// `track` runs on its caller's thread, which in a service is usually one it does not own: one
    /// of Swift concurrency's cooperative threads (as many as cores) or a NIO event loop. Blocking
    /// such a thread stalls every task or connection it serves, so the default drops. A caller that
    /// would rather wait calls ``Beacon/trackWaitingForRoom(_:properties:distinctId:)-(_,[String:PropertyValue],_)``, which
    /// suspends its task without holding a thread.
    public enum Backpressure: Sendable, Equatable {
        /// Drop the event at once, counted as `DropReason.backpressure` in ``BeaconStats/dropped``;
        /// the first drop is reported as a diagnostic (then at most one per
        /// ``Configuration/diagnosticsInterval``, with the count of those not reported). The default.
        case dropNewest
        /// Block the calling thread up to `timeout` for room, then drop the event (counted as
        /// `DropReason.backpressureTimeout`). Only for threads you own (a `Thread` or a queue of your own,
        /// a command-line tool): never set it where `track` runs on the cooperative pool or a NIO
        /// event loop, where a stalled disk would stall every request of the process.
        case blockCallingThread(timeout: Duration)
    }

    /// How to open a tracker. Every property has a documented default.
    ///
    /// ```swift
    /// var config = Beacon.Configuration(directory: "/var/lib/app/beacon", serverURL: url)
    /// config.appVersion = "2.3.1"
    /// config.delivery?.batchSize = 200         // the collector and how to reach it: DeliveryConfiguration
    /// config.storage.maxBytes = 64 << 20      // the log's settings: BeaconLog.Configuration
    /// let beacon = try Beacon(configuration: config)
    /// ```
    ///
    /// The log's settings are ``storage``, a `BeaconLog.Configuration` with BeaconLog's own
    /// defaults, so they are stated (and documented) once. Setting them
    /// (`config.storage.durability = .everyRecord`) needs only `import Beacon`; naming BeaconLog's
    /// types (`BeaconLog.Configuration`, `BeaconLogError`) needs `import BeaconLog` as well, and
    /// so does setting them in a module built with the upcoming feature `MemberImportVisibility`.
    public struct Configuration: Sendable {
        /// The log the tracker appends to: its directory, durability, segment size, quota, largest
        /// record and locks, with BeaconLog's defaults (100 records or 10 ms, 8 MiB segments,
        /// 256 MiB, `.dropOldest`, 1 MiB, `.readWrite`). The tracker takes `access` `.readWrite`
        /// (it appends and delivers) or `.write` (it appends only, leaving the reader lock to
        /// another process that delivers: `beacon send`); opening throws for the others. Its
        /// `onDropped`, when set, is called after the tracker's own report of a quota deletion.
        public var storage: BeaconLog.Configuration
        /// The log directory (created with mode 0700): ``storage``'s `directory`, the one place it
        /// is kept. One tracker per directory: opening takes the log's writer lock.
        public var directory: String {
            get { storage.directory }
            set { storage.directory = newValue }
        }
        /// Sent as the `$app_version` preset on every event when set.
        public var appVersion: String?

        // MARK: Hand-off between `track` and the writer

        /// The most encoded bytes waiting for the writer. Default 8 MiB (about 40,000 typical events).
        public var handoffBytes: Int = 8 << 20
        /// What `track` does when `handoffBytes` are waiting. Default `.dropNewest`: `track` never
        /// waits, whatever thread calls it.
        ///
        /// The hand-off is full only when the disk has fallen behind by tens of thousands of events
        /// (a stalled or failing disk, far beyond what one fsync explains). Dropped events are
        /// counted in ``BeaconStats/dropped`` and reported (rate-limited) to ``diagnostics``.
        /// To wait instead: ``Beacon/trackWaitingForRoom(_:properties:distinctId:)-(_,[String:PropertyValue],_)`` from async
        /// code, or `.blockCallingThread(timeout:)` on threads you own.
        public var backpressure: Backpressure = .dropNewest

        // MARK: Events and diagnostics

        /// Track `$AppStart` when the tracker opens and `$AppEnd` (with the uptime as
        /// `$event_duration`) when it closes. Default true.
        public var lifecycleEvents: Bool = true
        /// Receives refused inputs and dropped or failed writes, rate-limited at the source (see
        /// ``diagnosticsInterval``), so any sink (a swift-log `Logger`, say) is safe to plug in.
        /// Default: one line on standard error, at most 10 a second.
        public var diagnostics: @Sendable (BeaconDiagnostic) -> Void = BeaconDiagnostic.standardError()
        /// The same diagnostic (same ``BeaconDiagnostic/kind`` and ``BeaconDiagnostic/subject``)
        /// reaches ``diagnostics`` at most once per interval; the next one that does carries, in
        /// ``BeaconDiagnostic/suppressed``, how many were held back (when none comes, a summary does
        /// once the interval has passed, at the latest when the tracker closes). Default 10 s on
        /// ``monotonicClock``; `.zero` passes every diagnostic through.
        public var diagnosticsInterval: Duration = .seconds(10)

        // MARK: Injection for tests

        /// The wall clock for event `time`. Default `Date()`.
        public var wallClock: @Sendable () -> Date = { Date() }
        /// The monotonic clock for timers and uptime. Default `ContinuousClock()`; changing the
        /// system time changes no duration.
        public var monotonicClock: any Clock<Duration> = ContinuousClock()
        /// Makes each record's `_track_id`. Default: a per-instance random 64-bit seed run through
        /// a bijective mixer with a counter, so ids never repeat within an instance and collide
        /// across instances with probability ~2⁻⁶⁴.
        public var trackIdGenerator: (@Sendable () -> UInt64)?

        // MARK: Delivery
        // The delivery issue adds its settings (transport, flush policy, clock) below this line.

        /// The collector and how events reach it: its `url` (the one place the collector is named),
        /// batch size (50), flush policy (100 pending, every 15 s), request timeout, format, gzip,
        /// headers, backoff and `maxEventAge`, with the defaults of ``DeliveryConfiguration``.
        /// Nil (the default unless `serverURL` was given to the initializer) keeps events on disk
        /// only, for another process to deliver (`beacon send`). Backoff and intervals run on
        /// ``monotonicClock``.
        public var delivery: DeliveryConfiguration?
        /// How upload requests are sent. Default nil: ``Uploader/defaultTransport(for:environment:)``,
        /// Beacon's own ``SocketTransport`` (less CPU, flat memory) for `http://` and `https://`,
        /// directly or through the environment's HTTP proxy; `HTTPTransport` (URLSession, module `BeaconURLSession`) only
        /// when set here.
        public var transport: (any Transport)?
        /// How long the shutdown a cancelled ``Beacon/run()`` starts may deliver what is pending
        /// before the log is closed (the rest stays on disk for the next run); also the
        /// termination handler's default. Keep it below the time your orchestrator allows between
        /// SIGTERM and SIGKILL. Default 2 s.
        public var shutdownGrace: Duration = .seconds(2)

        /// A configuration for a log in `directory` with BeaconLog's defaults, delivering to
        /// `serverURL` with the default ``delivery`` settings when set.
        public init(directory: String, serverURL: URL? = nil) {
            self.init(storage: BeaconLog.Configuration(directory: directory), serverURL: serverURL)
        }

        /// A configuration for the log `storage` describes, delivering to `serverURL` with the
        /// default ``delivery`` settings when set.
        public init(storage: BeaconLog.Configuration, serverURL: URL? = nil) {
            self.storage = storage
            self.delivery = serverURL.map(DeliveryConfiguration.init(url:))
        }
    }
}
