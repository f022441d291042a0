import BeaconLog

/// Counters of a tracker, since it was opened.
public struct BeaconStats: Sendable, Equatable {
    /// Records accepted by `track`, the profile calls and lifecycle events.
    public var tracked: UInt64 = 0
    /// Inputs refused by a validation rule.
    public var invalid: UInt64 = 0
    /// Refused inputs by rule.
    public var invalidByRule: [BeaconValidationError.Code: UInt64] = [:]
    /// Accepted records that will never be delivered, by reason: those that never reached the
    /// log (`.backpressure`, `.backpressureTimeout`, `.closed`, and the log's refusals:
    /// `.quotaExceeded`, `.diskFull`, `.logFailed`, `.logError`), and
    /// `.quotaDeleted`: pending records the log deleted to stay within `maxBytes` (`.dropOldest`)
    /// before they were delivered. Each `DropReason.explanation` says what to do. Events set
    /// aside by delivery are in ``Beacon/deliveryStats`` and ``FlushResult/dropped``.
    public var dropped: [DropReason: UInt64] = [:]
    /// Records written by this tracker that are durable (fsynced).
    public var durable: UInt64 = 0
    /// Records accepted but not yet durable: waiting for the writer, or written and not yet fsynced.
    public var pending: UInt64 = 0
    /// The last storage error, for diagnostics.
    public var lastError: String?

    /// All counters zero: a tracker that has recorded nothing.
    public init() {}

    /// All dropped records.
    public var droppedTotal: UInt64 { dropped.values.reduce(0, +) }
}
