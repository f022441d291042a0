/// The tracker's life as a pure state machine: open → running → ending → closed.
///
/// Six calls end a tracker. `close()`, `closeNow()` and `deinit` end it with ``Ending/close``;
/// `shutdown(timeout:)`, a cancelled `run()` and the termination handler with
/// ``Ending/shutdown(deadline:)``. The first one decides how it ends; every later one (of any
/// kind, in any order, concurrent or not) waits for that ending and returns its report.
/// ``Beacon`` only carries out the actions.
///
/// | state | run | run cancelled | close | shutdown | ended |
/// |---|---|---|---|---|---|
/// | open | running; deliver | invalid | ending(close); end | ending(shutdown); end | invalid |
/// | running | wait for the end | ending(shutdown, grace); end | ending(close); end | ending(shutdown); end | invalid |
/// | ending | wait for the end | — | wait for the end | wait for the end | closed; resume the waiters |
/// | closed | the report | — | the report | the report | invalid |
///
/// "—" ignores the input (a `run()` cancelled after another ending began). "invalid" cannot
/// happen (only a running `run()` is cancelled; only an ending ends, once): it fails loudly
/// (``InvalidTransition``: a debug build stops, a release build reports it and stays put).
struct TrackerLifecycle: Hashable, Sendable {
    /// How the tracker ends.
    enum Ending: Hashable, Sendable {
        /// Stop accepting (after `$AppEnd`), write and fsync what was tracked, stop delivery
        /// without uploading (a request in flight is cancelled; its events stay on disk), close
        /// the log.
        case close
        /// The same, but deliver what is pending first, until drained, a failure or the deadline
        /// (nil: one pass that stops at the first failure).
        case shutdown(deadline: Duration?)
    }

    enum State: Hashable, Sendable {
        /// Accepting events; delivery (if any) is driven by the tracker's own loop.
        case open
        /// A `run()` caller drives delivery in its task.
        case running
        case ending(Ending)
        case closed
    }

    enum Input: Hashable, Sendable {
        case run
        /// The task of a `run()` caller was cancelled.
        case runCancelled
        /// `close()`, `closeNow()`, `deinit`.
        case close
        /// `shutdown(timeout:)`, the termination handler.
        case shutdown(deadline: Duration?)
        /// The ending's work is done (the log is closed).
        case ended
    }

    enum Action: Hashable, Sendable {
        /// Drive delivery in the caller's task until the tracker ends, then return its report.
        case deliver
        /// Carry out the ending, then report ``Input/ended``.
        case end(Ending)
        /// Another caller's ending runs: wait for it and return its report.
        case waitForEnd
        /// Closed already: return the report kept.
        case report
        /// Closed now: wake everyone waiting, with the report.
        case resumeWaiters
        /// Nothing to do.
        case none
        /// The input cannot happen in this state: report it (``InvalidTransition``).
        case invalid(InvalidTransition)
    }

    private(set) var state: State = .open
    /// The deadline of the ending a cancelled `run()` starts (``Beacon/Configuration/shutdownGrace``).
    let runGrace: Duration?

    init(runGrace: Duration?) {
        self.runGrace = runGrace
    }

    mutating func handle(_ input: Input) -> Action {
        switch (state, input) {
        case (.open, .run):
            state = .running
            return .deliver
        case (.running, .run), (.ending, .run), (.ending, .close), (.ending, .shutdown):
            return .waitForEnd
        case (.closed, .run), (.closed, .close), (.closed, .shutdown):
            return .report

        case (.running, .runCancelled):
            state = .ending(.shutdown(deadline: runGrace))
            return .end(.shutdown(deadline: runGrace))
        case (.ending, .runCancelled), (.closed, .runCancelled):
            return .none

        case (.open, .close), (.running, .close):
            state = .ending(.close)
            return .end(.close)
        case (.open, .shutdown(let deadline)), (.running, .shutdown(let deadline)):
            state = .ending(.shutdown(deadline: deadline))
            return .end(.shutdown(deadline: deadline))

        case (.ending, .ended):
            state = .closed
            return .resumeWaiters
        case (.open, .runCancelled), (.open, .ended), (.running, .ended), (.closed, .ended):
            return .invalid(InvalidTransition.failed("TrackerLifecycle", state: state, input: input))
        }
    }

    /// Whether the tracker still accepts events and delivers in the background.
    var isOpen: Bool { state == .open || state == .running }
}
