/// Why records that were accepted will never be delivered: the key of every loss counter
/// (``LogStats/dropped``, and in `Beacon` the tracker's `BeaconStats.dropped` and
/// `FlushResult.dropped`).
///
/// Compare with the static reasons; the set may grow in a later version, so keep a default case.
/// Only the library makes reasons: a counter cannot be filed under a misspelt one.
///
/// ```swift
/// let lost = beacon.stats.dropped[.backpressure, default: 0]
/// for (reason, count) in result.dropped { print("\(reason): \(count): \(reason.explanation)") }
/// ```
public struct DropReason: Hashable, Sendable, CustomStringConvertible {
    private enum Kind: String, CaseIterable, Sendable {
        case closed, backpressure, backpressureTimeout
        case quotaExceeded, diskFull, logFailed, logError
        case quotaDeleted, quotaInDoubt, rejected, expired
    }

    private let kind: Kind
    private init(_ kind: Kind) { self.kind = kind }

    /// `track` was called after the tracker closed (or while it was shutting down).
    public static let closed = DropReason(.closed)
    /// The hand-off between `track` and the writer was full and the event was not waited for.
    public static let backpressure = DropReason(.backpressure)
    /// The hand-off stayed full for the whole time `track` was allowed to wait.
    public static let backpressureTimeout = DropReason(.backpressureTimeout)
    /// The log refused the records: its quota (`maxBytes`) was reached under `.rejectNew`.
    public static let quotaExceeded = DropReason(.quotaExceeded)
    /// The log refused the records: the disk is full and enough records already wait in memory.
    public static let diskFull = DropReason(.diskFull)
    /// The log had failed (an fsync failed) or was closed, and refused the records.
    public static let logFailed = DropReason(.logFailed)
    /// The log refused the records for a reason no other case names (the last error says which).
    public static let logError = DropReason(.logError)
    /// Pending records the log deleted to stay within `maxBytes` (`.dropOldest`) before they were
    /// delivered.
    public static let quotaDeleted = DropReason(.quotaDeleted)
    /// Records the log's quota deleted while they were in flight: sent to the collector, but the
    /// sender ended (killed, stopped) before it recorded the answer, so they may have been
    /// delivered. Counted apart from ``quotaDeleted``, which then means never sent.
    public static let quotaInDoubt = DropReason(.quotaInDoubt)
    /// The collector refused the events permanently; they are set aside in `rejected.jsonl`.
    public static let rejected = DropReason(.rejected)
    /// The events were older than `maxEventAge`; they are set aside in `rejected.jsonl`.
    public static let expired = DropReason(.expired)

    /// A stable identifier without spaces, for metric labels and JSON: `"backpressure"`.
    public var name: String { kind.rawValue }

    public var description: String { name }

    /// What happened, for people, and what to do about it.
    public var explanation: String {
        switch kind {
        case .closed:
            "the tracker was closed (or shutting down) when the event was tracked; track before shutdown()"
        case .backpressure:
            "the hand-off to the writer was full (the disk is behind or stalled); raise handoffBytes, or wait for room with trackWaitingForRoom (it suspends the task, never a thread)"
        case .backpressureTimeout:
            "the hand-off to the writer stayed full for the whole block timeout (the disk is behind or stalled); check the disk, raise handoffBytes"
        case .quotaExceeded:
            "the log reached its quota (maxBytes) under quotaPolicy .rejectNew; deliver faster, raise maxBytes, or use .dropOldest"
        case .diskFull:
            "the file system is full and the records waiting in memory reached their bound; free space on it"
        case .logFailed:
            "the log failed (an fsync error) or was closed; reopen it (restart the tracker) and check the disk"
        case .logError:
            "the log refused the records; stats.lastError says why"
        case .quotaDeleted:
            "the log reached its quota (maxBytes) and deleted its oldest pending events before they were delivered; deliver faster (is the collector reachable?), raise maxBytes, or use quotaPolicy .rejectNew"
        case .quotaInDoubt:
            "the log reached its quota (maxBytes) and deleted events that had been sent but whose answer the sender never recorded (it was killed or stopped meanwhile): they may have been delivered; deliver faster, raise maxBytes, or stop the sender gracefully (SIGTERM)"
        case .rejected:
            "the collector refused the events permanently (400/422 after bisecting, 413 for one event); they are in rejected.jsonl"
        case .expired:
            "the events were older than maxEventAge when their turn came; they are in rejected.jsonl"
        }
    }

    /// Every reason this version knows, for tests and for tools that list them.
    package static var allCases: [DropReason] { Kind.allCases.map(DropReason.init) }

    /// The reason a stored counter was saved under (``name``; `"quota"` from earlier versions'
    /// `writer.counters`), or nil for one this version does not know.
    package init?(name: String) {
        if name == "quota" { self = .quotaDeleted; return }
        guard let kind = Kind(rawValue: name) else { return nil }
        self.kind = kind
    }
}
