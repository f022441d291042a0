import BeaconLog
import Foundation
import Glibc
import Synchronization

/// A durable analytics tracker for a Linux service: events, identity, profiles, timers and
/// lifecycle events, recorded in a crash-safe `BeaconLog`.
///
/// `track` is synchronous, never throws and never waits: it validates and encodes the event to
/// JSON bytes on the caller's thread and hands them to one writer thread, which group-commits them
/// to the log. Events reach the log in the order of the `track` calls. When the disk falls far
/// behind, `track` drops and counts (see ``Configuration/backpressure``);
/// ``trackWaitingForRoom(_:properties:distinctId:)-(_,[String:PropertyValue],_)`` suspends instead.
///
/// ```swift
/// import Beacon
/// import Foundation
///
/// let beacon = try Beacon(configuration: .init(directory: "/var/lib/app/beacon"))
/// beacon.track("Purchase", properties: ["price": 9.99, "item": "book", "vip": true])
/// await beacon.close()
/// ```
///
/// Invalid input is refused with a diagnostic naming the event, the key and the rule (see
/// ``Configuration/diagnostics``) and counted in ``stats``. All methods are thread-safe.
public final class Beacon: Sendable {
    /// Beacon's version, written here and nowhere else: events carry it as `$lib_version` and
    /// requests in `User-Agent: beacon-swift/<version>`. No release is tagged yet; a release's tag
    /// will be this string (`Tests/Docs/dependency-line.sh` checks a tag on the built commit).
    public static let libraryVersion = "0.1.0"

    /// The configuration the tracker was opened with.
    public let configuration: Configuration
    /// The log the tracker writes to (the delivery side reads from it).
    let log: BeaconLog
    let writer: EventWriter
    let identityStore: IdentityStore
    let presets: [Snapshot.Entry]
    let context: Mutex<Context>
    let counters: Locked<Counters>
    let trackedCount = Atomic<UInt64>(0)
    let timerState = Mutex<TimerTable>(TimerTable())
    /// Monotonic time since the tracker opened.
    let elapsed: @Sendable () -> Duration
    let makeTrackId: @Sendable () -> UInt64
    /// The tracker's life (``TrackerLifecycle``), its report once ended, and who waits for it
    /// (Beacon+Lifecycle.swift).
    let life: ConditionLock<Life>
    /// Serialises identity changes with their saves.
    let identitySaves = Mutex<Void>(())
    /// The uploader and the shutdown state (Beacon+Delivery.swift).
    let delivery: DeliveryState
    /// Pending events the log's quota deleted since the tracker opened.
    let quotaDrops = QuotaDrops()
    /// Rate-limits `configuration.diagnostics` at the source; flushed when the log closes.
    let diagnosticLimiter: DiagnosticLimiter

    struct Context: Sendable {
        var identity: IdentityStore.Identity
        var superProperties: [String: PropertyValue] = [:]
        var dynamicSuperProperties: (@Sendable () -> [String: PropertyValue])?
        var snapshot: Snapshot
    }

    struct Counters: Sendable {
        var invalidByRule: [BeaconValidationError.Code: UInt64] = [:]
        var dropped: [DropReason: UInt64] = [:]
        var lastError: String?
    }

    /// Opens (or creates) the log in `configuration.directory`, recovering it after an unclean
    /// stop, loads or creates the identity, and tracks `$AppStart` (unless lifecycle events are off).
    ///
    /// Throws `BeaconLogError` if the log cannot be opened, for example `.locked` when another
    /// tracker (in this or another process) uses the directory.
    /// Throws before opening anything when the configuration is wrong: ``DeliveryError`` with
    /// `.configuration` for a delivery value out of range, `BeaconLogError` `.invalidArgument` for a `storage.access` that
    /// cannot append.
    public init(configuration: Configuration) throws {
        try configuration.validate()
        // Every diagnostic, the delivery side's included, goes through the limiter.
        var configuration = configuration
        let limiter = DiagnosticLimiter(interval: configuration.diagnosticsInterval,
                                        now: Beacon.elapsedClock(configuration.monotonicClock),
                                        sink: configuration.diagnostics)
        configuration.diagnostics = { limiter.report($0) }
        self.diagnosticLimiter = limiter
        self.configuration = configuration
        var logConfig = configuration.storage
        let quotaDrops = self.quotaDrops, maxBytes = logConfig.maxBytes, report = configuration.diagnostics
        let userOnDropped = logConfig.onDropped
        let watch = WriterWatch()
        logConfig.onDropped = { records in
            watch.quotaActed()
            if let message = quotaDrops.message(dropped: records, maxBytes: maxBytes) {
                report(BeaconDiagnostic(kind: .dropped, message: message, subject: DropReason.quotaDeleted.name))
            }
            userOnDropped?(records)
        }
        let log = try BeaconLog(configuration: logConfig)
        quotaDrops.opened(log)
        self.log = log
        self.delivery = try DeliveryState(configuration: configuration, log: log)
        self.life = ConditionLock(Life(machine: TrackerLifecycle(runGrace: configuration.shutdownGrace)))
        self.elapsed = Beacon.elapsedClock(configuration.monotonicClock)
        self.makeTrackId = configuration.trackIdGenerator ?? Beacon.defaultTrackIdGenerator()
        self.presets = Beacon.presets(appVersion: configuration.appVersion)

        let diagnostics = configuration.diagnostics
        let store = IdentityStore(directory: log.directory, fileSystem: log.configuration.fileSystem)
        self.identityStore = store
        var identity: IdentityStore.Identity
        var mustSave = false
        do {
            if let stored = try store.load() {
                identity = stored
            } else {
                identity = IdentityStore.Identity(anonymousId: UUID().uuidString.lowercased(), loginId: nil)
                mustSave = true
            }
        } catch {
            diagnostics(BeaconDiagnostic(kind: .storage, message: "\(error)"))
            identity = IdentityStore.Identity(anonymousId: UUID().uuidString.lowercased(), loginId: nil)
            // An unreadable file may hold the identity still: only a file without one is rewritten.
            mustSave = (error as? IdentityError)?.invalid ?? true
        }
        var counters = Counters()
        if mustSave {
            do { try store.save(identity) } catch {
                counters.lastError = "\(error)"
                diagnostics(BeaconDiagnostic(kind: .storage, message: "\(error)"))
            }
        }
        let snapshot = Snapshot(anonymousId: identity.anonymousId, loginId: identity.loginId, presets: presets, superProperties: [:], dynamicSuperProperties: nil)
        self.context = Mutex(Context(identity: identity, snapshot: snapshot))
        let countersMutex = Locked(counters)
        self.counters = countersMutex
        watch.configure(log: log, report: diagnostics)
        self.writer = EventWriter(log: log, capacity: configuration.handoffBytes, backpressure: configuration.backpressure, watch: watch, hooks: EventWriter.Hooks(
            onAppended: delivery.uploader.map(Beacon.deliveryTrigger),
            onFailure: { records, reason, error in
                if reason == .quotaExceeded { watch.quotaActed() }
                countersMutex.withLock { c in
                    c.lastError = "\(error)"
                    if let reason { c.dropped[reason, default: 0] += UInt64(records) }
                }
                diagnostics(BeaconDiagnostic(kind: reason == nil ? .storage : .dropped, message: reason.map {
                    "the log refused \(records) records (\($0)): \(error)"
                } ?? "the log could not write \(records) records yet; they are kept in memory: \(error)", subject: reason?.name ?? "kept"))
            }))
        if configuration.lifecycleEvents {
            record(RecordEncoder.Input(type: .track, event: "$AppStart", isBeaconEvent: true, properties: [:], distinctId: nil,
                                       durationMicroseconds: nil, withPresets: true))
        }
    }

    /// Opens a tracker on `directory` with the default configuration.
    public convenience init(directory: String) throws {
        try self.init(configuration: Configuration(directory: directory))
    }

    /// A tracker released without being closed closes in the background: its last events
    /// (`$AppEnd` too) are written, fsynced and the log closed on its own writer thread, never on
    /// the thread that dropped the last reference (a cooperative thread, maybe), which does not
    /// wait. Until then the directory stays locked; opening it again in this process waits for
    /// that close, and so does the process's exit (up to 10 s). Close it yourself (``close()``,
    /// ``shutdown(timeout:)``) to know when it is done and how it went.
    deinit {
        guard case .end = lifecycle(.close).action else { return }
        closeInBackground()
    }

    // MARK: Tracking

    /// Records an event with `properties`, for the current user (the login id, else the anonymous
    /// id) or for `distinctId` when given (a multi-user service).
    ///
    /// Synchronous, never throws, never waits for the disk: when the hand-off to the writer is
    /// full it drops the event and counts it (except under `.blockCallingThread` backpressure).
    /// Invalid input is refused with a diagnostic and counted in `stats`.
    ///
    /// ```swift
    /// beacon.track("Purchase", properties: ["price": 9.99, "item": "book"])
    /// ```
    /// - Parameters:
    ///   - event: The event name: ASCII letters, digits, `_`, not starting with a digit or `$`, ≤ 100 characters.
    ///   - properties: The event's properties; they win over super properties and presets.
    ///   - distinctId: The user of this event, instead of the tracker's identity.
    public func track(_ event: String, properties: [String: PropertyValue] = [:], distinctId: String? = nil) {
        record(RecordEncoder.Input(type: .track, event: event, properties: properties, distinctId: distinctId,
                                   durationMicroseconds: nil, withPresets: true))
    }

    /// Records an event like ``track(_:properties:distinctId:)-(_,[String:PropertyValue],_)``, but when the hand-off to the
    /// writer is full (the disk has fallen far behind) suspends the calling task until there is
    /// room, instead of dropping the event. It never blocks a thread: the task gives its thread
    /// back and the writer resumes it. Waiting events are queued oldest first.
    ///
    /// The event is dropped and counted anyway when the tracker closes while it waits (`DropReason.closed`)
    /// or the task is cancelled (`DropReason.backpressure`). A request handler that calls this waits as
    /// long as the disk does: bound it with the request's own timeout.
    ///
    /// ```swift
    /// await beacon.trackWaitingForRoom("Import", properties: ["rows": 1200])
    /// ```
    public func trackWaitingForRoom(_ event: String, properties: [String: PropertyValue] = [:], distinctId: String? = nil) async {
        await recordWaitingForRoom(RecordEncoder.Input(type: .track, event: event, properties: properties, distinctId: distinctId,
                                                       durationMicroseconds: nil, withPresets: true))
    }

    /// A test seam: freezes the writer thread (it takes nothing from the hand-off, like a writer
    /// stuck in a stalled disk) or thaws it. Closing thaws it.
    package func setWriterFrozen(_ frozen: Bool) {
        writer.setFrozen(frozen)
    }

    /// Group commits the writer thread has made since the tracker opened (a measurement seam for
    /// `beacon-bench --phase paced`): under `.batched` at most about one per commit interval.
    package var writerCommits: UInt64 {
        writer.batchesTaken
    }

    /// Times the writer thread came back from waiting for work since the tracker opened (a
    /// measurement seam for `beacon-bench --phase paced`): its own wakeups, without the waits for
    /// the disk inside each commit's `write` and `fsync`.
    package var writerWaitsEnded: UInt64 {
        writer.waitsEnded
    }

    /// Bytes appended to the log since it opened, frames included (a measurement seam).
    package var appendedBytes: UInt64 {
        log.stats.appendedBytes
    }

    /// Throws the ``BeaconValidationError`` that `track` would report for this input, or nothing if
    /// `track` would accept it. Records nothing.
    public func validate(_ event: String, properties: [String: PropertyValue] = [:], distinctId: String? = nil) throws {
        _ = try encode(RecordEncoder.Input(type: .track, event: event, properties: properties, distinctId: distinctId,
                                           durationMicroseconds: nil, withPresets: true))
    }

    /// Encodes a record (filling in its id and time) or throws why it is refused.
    func encode(_ input: RecordEncoder.Input) throws -> [UInt8] {
        let trackId = makeTrackId()
        let time = JSONBytes.milliseconds(configuration.wallClock())
        let snapshot = context.withLock { $0.snapshot }
        return try ByteWriter.withWriter { out in
            try RecordEncoder.encode(input, trackId: trackId, timeMilliseconds: time, snapshot: snapshot, into: &out)
            if out.count > configuration.storage.maxRecordBytes {
                throw BeaconValidationError(event: RecordEncoder.subject(input), key: nil, code: .recordTooLarge,
                                            message: "the record is \(out.count) bytes, more than storage.maxRecordBytes (\(configuration.storage.maxRecordBytes)); send fewer or shorter properties")
            }
            return out.makeArray()
        }
    }

    /// Validates, encodes and queues one record; reports and counts what is refused or dropped.
    func record(_ input: RecordEncoder.Input) {
        guard let bytes = accept(input) else { return }
        noteDropped(writer.enqueue(bytes), input)
    }

    /// Like ``record(_:)``, suspending while the hand-off is full (``trackWaitingForRoom(_:properties:distinctId:)-(_,[String:PropertyValue],_)``).
    func recordWaitingForRoom(_ input: RecordEncoder.Input) async {
        guard let bytes = accept(input) else { return }
        noteDropped(await writer.enqueueWaitingForRoom(bytes), input)
    }

    /// The record's bytes, counted as tracked; nil (reported and counted) when refused.
    func accept(_ input: RecordEncoder.Input) -> [UInt8]? {
        let bytes: [UInt8]
        do {
            bytes = try encode(input)
        } catch let error as BeaconValidationError {
            refuse(error)
            return nil
        } catch {
            refuse(BeaconValidationError(event: RecordEncoder.subject(input), key: nil, code: .identifier, message: "\(error)"))
            return nil
        }
        trackedCount.add(1, ordering: .relaxed)
        return bytes
    }

    private func noteDropped(_ outcome: EventWriter.Outcome, _ input: RecordEncoder.Input) {
        guard case .dropped(let reason) = outcome else { return }
        counters.withLock { $0.dropped[reason, default: 0] += 1 }
        configuration.diagnostics(BeaconDiagnostic(
            kind: .dropped, message: "dropped event \"\(RecordEncoder.subject(input))\" (\(reason)): \(reason.explanation)",
            subject: reason.name))
    }

    func refuse(_ error: BeaconValidationError) {
        counters.withLock { $0.invalidByRule[error.code, default: 0] += 1 }
        configuration.diagnostics(BeaconDiagnostic(kind: .invalidInput, validation: error, message: error.description,
                                                   subject: "\(error.code.name) \(error.event) \(error.key ?? "")"))
    }

    // MARK: Stats

    /// Counters since the tracker opened.
    public var stats: BeaconStats {
        // The log first, then the writer: what became durable in between is counted as pending
        // (never twice, never durable and pending at once).
        let logStats = log.stats
        let accepted = writer.accepted
        var stats = BeaconStats()
        stats.tracked = trackedCount.load(ordering: .relaxed)
        counters.withLock { c in
            stats.invalidByRule = c.invalidByRule
            stats.dropped = c.dropped
            stats.lastError = c.lastError ?? logStats.lastError
        }
        let deleted = quotaDrops.count(in: logStats)
        if deleted > 0 { stats.dropped[.quotaDeleted] = deleted }
        stats.invalid = stats.invalidByRule.values.reduce(0, +)
        stats.durable = logStats.durableRecords
        stats.pending = accepted > logStats.durableRecords ? accepted - logStats.durableRecords : 0
        return stats
    }

    /// Blocks until every event tracked before the call is written to the log and fsynced
    /// (durable on disk, not delivered). Throws the log's error if the fsync fails.
    ///
    /// `track` never waits for the disk; call this where a step must not continue before its
    /// events are safe, or in tests.
    public func sync() throws {
        writer.waitUntilWritten()
        try log.sync()
    }

    func noteStorageError(_ error: any Error) {
        counters.withLock { $0.lastError = "\(error)" }
        configuration.diagnostics(BeaconDiagnostic(kind: .storage, message: "\(error)"))
    }

    /// Sets the hook the writer calls after each batch it appended, with the number of records
    /// pending in the log (the delivery side's count trigger). It runs on the writer thread: keep
    /// it short (signal, don't upload). `sync()` and closing from it do not wait for the writer.
    func setOnAppended(_ hook: (@Sendable (UInt64) -> Void)?) {
        writer.setOnAppended(hook)
    }
}

// MARK: - Helpers

extension Beacon {
    static func elapsedClock<C: Clock>(_ clock: C) -> @Sendable () -> Duration where C.Duration == Duration {
        let start = clock.now
        return { start.duration(to: clock.now) }
    }

    static func microseconds(_ duration: Duration) -> Int64 {
        let nanoseconds = duration.nanoseconds
        let (whole, rest) = nanoseconds.quotientAndRemainder(dividingBy: 1000)
        return whole + (rest >= 500 ? 1 : rest <= -500 ? -1 : 0)
    }

    /// Unique within the instance (a bijective mix of a counter), random-looking across instances.
    static func defaultTrackIdGenerator() -> @Sendable () -> UInt64 {
        let box = CounterBox(seed: UInt64.random(in: .min ... .max))
        return { box.next() }
    }

    final class CounterBox: Sendable {
        let seed: UInt64
        let counter = Atomic<UInt64>(0)
        init(seed: UInt64) { self.seed = seed }
        func next() -> UInt64 {
            // splitmix64's finaliser is a bijection on UInt64, so distinct counters give distinct ids.
            var z = seed &+ counter.wrappingAdd(1, ordering: .relaxed).oldValue &* 0x9E37_79B9_7F4A_7C15
            z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
            z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
            return z ^ (z >> 31)
        }
    }

    /// `$lib`, `$lib_version`, `$os`, `$os_version` (kernel release), `$model` (machine) and
    /// `$app_version` when configured.
    static func presets(appVersion: String?) -> [Snapshot.Entry] {
        var name = utsname()
        uname(&name)
        func field<T>(_ value: T) -> String {
            withUnsafeBytes(of: value) { raw in
                let bytes = raw.prefix { $0 != 0 }
                return String(decoding: bytes, as: UTF8.self)
            }
        }
        var entries: [Snapshot.Entry] = [
            .init(key: "$lib", value: "Swift"),
            .init(key: "$lib_version", value: .string(libraryVersion)),
            .init(key: "$os", value: "Linux"),
            .init(key: "$os_version", value: .string(field(name.release))),
            .init(key: "$model", value: .string(field(name.machine))),
        ]
        if let appVersion { entries.append(.init(key: "$app_version", value: .string(appVersion))) }
        return entries
    }
}
