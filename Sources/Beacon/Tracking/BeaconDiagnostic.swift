import Foundation
import Synchronization

/// Something the tracker refused, dropped or failed to do, for the diagnostics handler.
///
/// `track` never throws; this is how a service learns what went wrong.
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
        /// and uploads are paused, or they resumed.
        case delivery
    }

    /// The kind of problem.
    public var kind: Kind
    /// For `.invalidInput`: the event, key and rule.
    public var validation: BeaconValidationError?
    /// A sentence for people.
    public var message: String

    public init(kind: Kind, validation: BeaconValidationError? = nil, message: String) {
        self.kind = kind
        self.validation = validation
        self.message = message
    }

    public var description: String { "beacon: \(kind.rawValue): \(message)" }

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
