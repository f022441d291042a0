import Foundation
import Synchronization

/// Something the tracker refused, dropped or failed to do, for the diagnostics handler.
///
/// `track` never throws; this is how a service learns what went wrong. The tracker rate-limits
/// them before the handler sees them (``Beacon/Configuration/diagnosticsInterval``): a stalled disk
/// dropping 50,000 events makes one diagnostic, then one per interval with the count held back.
///
/// State changes an operator should see are diagnostics too, once each (subjects in
/// ``subject``): delivery `"paused"` and `"resumed"` (kind `.delivery`), the writer `"stalled"`
/// (no commit completed for more than a second) and `"recovered"`, the quota `"quota80"` and
/// `"quota100"` (kind `.storage`). Each carries a ``severity``.
///
/// A bridge to swift-log (the handler runs on the thread that had the problem: keep it short);
/// the severities are swift-log's level names:
///
/// ```swift
/// let logger = Logger(label: "beacon")
/// config.diagnostics = { diagnostic in
///     logger.log(level: Logger.Level(rawValue: diagnostic.severity.rawValue) ?? .warning, "\(diagnostic.message)", metadata: [
///         "kind": "\(diagnostic.kind)", "subject": "\(diagnostic.subject ?? "")", "suppressed": "\(diagnostic.suppressed)",
///     ])
/// }
/// ```
public struct BeaconDiagnostic: Sendable, CustomStringConvertible {
    /// The kind of problem.
    public enum Kind: String, Sendable {
        /// Input refused by a validation rule (``BeaconDiagnostic/validation`` says which).
        case invalidInput
        /// An event was dropped: backpressure, closed tracker, or the log refused it.
        case dropped
        /// The log or the identity file failed to write.
        case storage
        /// Delivery needs attention: the collector refused the configuration (401, 403, 404, …)
        /// or TLS failed and uploads are paused, or they resumed; events were set aside in
        /// `rejected.jsonl`; the log or a delivery file failed (``BeaconDiagnostic/deliveryError``).
        case delivery
        /// Beacon reached a state that cannot happen (a state machine received an input that is
        /// impossible in its state): a bug in Beacon, to be reported with the message. Debug
        /// builds stop at it; release builds ignore the input and report this.
        case internalError
    }

    /// How serious a diagnostic is; the raw values are swift-log's `Logger.Level` names.
    public enum Severity: String, Sendable, Comparable, CaseIterable {
        /// Something returned to normal: delivery resumed, the writer recovered.
        case notice
        /// Needs attention soon: delivery paused by an outage, a stalled disk, the quota past 80 %,
        /// refused input.
        case warning
        /// Events are lost or will be, or an operator must act: drops, a storage failure, a
        /// collector refusing the configuration, the quota full.
        case error

        public static func < (a: Severity, b: Severity) -> Bool {
            allCases.firstIndex(of: a)! < allCases.firstIndex(of: b)!
        }
    }

    /// The kind of problem.
    public var kind: Kind
    /// How serious it is (swift-log's level names): by default `.warning` for invalid input and
    /// `.error` for the other kinds; the state changes set their own.
    public var severity: Severity
    /// For `.invalidInput`: the event, key and rule.
    public var validation: BeaconValidationError?
    /// For `.delivery`: the failure, with the collector's status, the start of its answer and
    /// the cause (``DeliveryError/code`` `.configuration` when delivery paused, `.rejected` when
    /// events were set aside, `.storage` when the log or a delivery file failed); nil when
    /// delivery resumed.
    public var deliveryError: DeliveryError?
    /// A sentence for people.
    public var message: String
    /// What the diagnostic is about, within its kind: with ``kind``, what makes two diagnostics
    /// "the same" for rate limiting (`"backpressure"` for every event dropped because the hand-off
    /// is full, whatever the event). Nil: the message is the subject.
    public var subject: String?
    /// How many diagnostics of the same kind and subject were held back by rate limiting since
    /// the last one reported. Every diagnostic is either reported or counted in the `suppressed`
    /// of a later one of its subject.
    public var suppressed: Int

    /// A diagnostic of `kind`; `severity` nil is `.warning` for invalid input, `.error` otherwise.
    public init(kind: Kind, validation: BeaconValidationError? = nil, deliveryError: DeliveryError? = nil, message: String, subject: String? = nil, suppressed: Int = 0, severity: Severity? = nil) {
        self.kind = kind
        self.severity = severity ?? (kind == .invalidInput ? .warning : .error)
        self.validation = validation
        self.deliveryError = deliveryError
        self.message = message
        self.subject = subject
        self.suppressed = suppressed
    }

    public var description: String {
        let line = "beacon: \(severity.rawValue): \(kind.rawValue): \(message)"
        return suppressed > 0 ? line + " (and \(suppressed) more like it, not reported)" : line
    }

    /// A handler that writes one line per diagnostic to standard error, at most `perSecond` lines
    /// a second; the rest are counted and reported in the next line written.
    public static func standardError(perSecond: Int = 10) -> @Sendable (BeaconDiagnostic) -> Void {
        let limiter = RateLimiter(perSecond: perSecond)
        return { diagnostic in
            guard let suppressed = limiter.admit() else { return }
            var line = diagnostic.description
            if suppressed > 0 { line += " (\(suppressed) earlier diagnostics suppressed)" }
            FileHandle.standardError.write(Data((line + "\n").utf8))
        }
    }
}
