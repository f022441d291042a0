/// An input a state machine cannot receive in the state it is in: a bug in Beacon, never
/// something a caller did.
///
/// The machines fail loudly, as async-http-client's do: a debug build stops at
/// `assertionFailure` with a message naming the machine, the state and the input; a release build
/// leaves the state as it was and reports a ``BeaconDiagnostic`` of kind
/// ``BeaconDiagnostic/Kind/internalError`` (the shell that carries the machine's actions out
/// does, through ``Beacon/Configuration/diagnostics``).
///
/// ```swift
/// case (.open, .ended):
///     return .invalid(InvalidTransition.failed("TrackerLifecycle", state: state, input: input))
/// ```
struct InvalidTransition: Hashable, Sendable, CustomStringConvertible {
    /// The state machine's type name.
    let machine: String
    let state: String
    let input: String

    var description: String {
        "\(machine) received \(input) in state \(state), which cannot happen: a bug in Beacon (please report it with this message); the input was ignored"
    }

    /// The diagnostic a release build reports.
    var diagnostic: BeaconDiagnostic {
        BeaconDiagnostic(kind: .internalError, message: description, subject: "\(machine) \(state) \(input)")
    }

    /// A test seam: while set (for a task, with `$recorder.withValue`), an invalid transition is
    /// handed to it instead of stopping a debug build, so that a test can check that one fails.
    @TaskLocal static var recorder: (@Sendable (InvalidTransition) -> Void)?

    /// Fails loudly: `assertionFailure` in a debug build (unless ``recorder`` is set), nothing
    /// in a release build; returns the transition for the caller's report.
    static func failed(_ machine: String, state: some Sendable, input: some Sendable) -> InvalidTransition {
        let transition = InvalidTransition(machine: machine, state: "\(state)", input: "\(input)")
        if let recorder {
            recorder(transition)
        } else {
            assertionFailure(transition.description)
        }
        return transition
    }
}
