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

/// Admits at most `perSecond` calls in each second of the monotonic clock.
final class RateLimiter: Sendable {
    struct State {
        var windowStart: ContinuousClock.Instant
        var admitted = 0
        var suppressed = 0
    }
    let perSecond: Int
    let state: Mutex<State>

    init(perSecond: Int) {
        self.perSecond = perSecond
        self.state = Mutex(State(windowStart: .now))
    }

    /// Nil when the call is suppressed; else how many were suppressed since the last admitted one.
    func admit() -> Int? {
        state.withLock { s in
            let now = ContinuousClock.now
            if now - s.windowStart >= .seconds(1) {
                s.windowStart = now
                s.admitted = 0
            }
            guard s.admitted < perSecond else {
                s.suppressed += 1
                return nil
            }
            s.admitted += 1
            defer { s.suppressed = 0 }
            return s.suppressed
        }
    }
}
