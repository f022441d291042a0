import BeaconLog

/// What a flush (or the upload part of a shutdown) achieved.
public struct FlushResult: Sendable, CustomStringConvertible {
    /// Why the flush stopped.
    public enum Outcome: Sendable, CustomStringConvertible {
        /// Everything pending was delivered (or set aside as rejected / expired).
        case drained
        /// Nothing was pending.
        case noData
        /// Delivery failed (the error says why and what to do); the events stay stored and are
        /// retried later with backoff.
        case failed(DeliveryError)
        /// The deadline came before everything was delivered; the rest stays stored.
        case deadlineReached

        public var description: String {
            switch self {
            case .drained: "drained"
            case .noData: "no data"
            case .failed(let error): "failed: \(error)"
            case .deadlineReached: "deadline reached"
            }
        }

        /// True for `.drained` and `.noData`.
        public var isComplete: Bool {
            switch self {
            case .drained, .noData: true
            default: false
            }
        }
    }

    /// Events the collector accepted during this flush.
    public var sent: Int
    /// Events still pending in the log afterwards.
    public var remaining: UInt64
    /// Why it stopped.
    public var outcome: Outcome
    /// Events that will never be delivered, since the tracker (or the uploader) opened, by reason:
    /// `.quotaDeleted` (the log's quota deleted them before they were sent), `.rejected` and
    /// `.expired` (set aside in `rejected.jsonl`), and for a tracker its own drops (see
    /// ``BeaconStats/dropped``). Empty when nothing was lost.
    public var dropped: [DropReason: UInt64]

    /// A result; `dropped` defaults to nothing lost.
    public init(sent: Int, remaining: UInt64, outcome: Outcome, dropped: [DropReason: UInt64] = [:]) {
        self.sent = sent
        self.remaining = remaining
        self.outcome = outcome
        self.dropped = dropped
    }

    /// All events in ``dropped``.
    public var droppedTotal: UInt64 { dropped.values.reduce(0, +) }

    public var description: String {
        let losses = dropped.filter { $0.value > 0 }.sorted { $0.key.name < $1.key.name }
        let lost = losses.isEmpty ? "" : ", dropped \(droppedTotal) (\(losses.map { "\($0.key) \($0.value)" }.joined(separator: ", ")))"
        return "sent \(sent), remaining \(remaining)\(lost), \(outcome)"
    }
}
