/// The parts of ``UploaderScheduler``'s state that are not its `State` enum, each one concept
/// with its invariant: the loop that drives passes, the triggers that make one due, and the last
/// failure that a backoff is entered from.
extension UploaderScheduler {
    /// The delivery loop: which one drives background passes, and its next interval tick.
    struct Loop: Hashable, Sendable {
        /// The loop that drives background passes (0: none).
        private(set) var id: UInt64 = 0
        /// Loops started so far (the next one's id).
        private(set) var started: UInt64 = 0
        /// The next interval tick, while a loop runs and an interval is set.
        var nextTick: Duration?

        mutating func start() -> (id: UInt64, replaced: Bool) {
            started += 1
            let replaced = id != 0
            id = started
            return (id, replaced)
        }

        mutating func end(_ ended: UInt64) {
            guard ended == id else { return }
            id = 0
            nextTick = nil
        }
    }

    /// What makes a background pass due.
    struct Trigger: Hashable, Sendable {
        /// A background pass should start as soon as the state allows.
        var due = false
        /// The count trigger fired and its pass has not ended (further counts do nothing).
        var armed = false
        /// Events the count trigger knows to be waiting.
        var unsent = 0
    }

    /// A failed pass: when the next background pass may run, and the probing meanwhile.
    struct Failure: Equatable, Sendable {
        /// No background pass before this (the backoff, or the collector's `Retry-After`).
        var retryAt: Duration
        /// Probing the collector while backing off after a failure without an answer.
        var probe: ResumeProbe
    }
}
