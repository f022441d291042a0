/// When the uploader sends and who sends: its scheduling as a pure state machine.
///
/// Each input (the delivery loop asking for its next step, a trigger, a pass or flush ending,
/// shutdown, stop) changes the state and returns what the ``Uploader`` must do; the uploader
/// only carries that out (wakes the loop, cancels what runs, resumes waiting callers). No clock,
/// task or I/O here: times are readings of the uploader's monotonic clock, passed in.
///
/// | state | a trigger | loop's next step | a flush | shutdown | stop |
/// |---|---|---|---|---|---|
/// | idle | due; wake the loop | pass if due, else wait for the interval | runs | drains | stopped |
/// | backingOff(until) | due | pass at `until` or when a probe saw the collector come back; probe | runs | drains | stopped |
/// | sending | due (after the pass) | wait | waits for the pass | waits for the pass, cancels it at the deadline | cancels the pass |
/// | flushing | due (after the flush) | wait | joins | waits for the flush, cancels it at the deadline | cancels the flush |
/// | shuttingDown | ignored | exit | refused | joins | cancels what runs; no drain |
/// | stopped | ignored | exit | refused | the kept report | nothing |
///
/// A pass or flush ending in a state where none can run (the end of a background pass outside
/// `sending`, a flush's outside `flushing`; both are ignored once stopped) is an invalid
/// transition: it fails loudly (``InvalidTransition``) and changes nothing.
///
/// While backing off after a failure that got no answer, the loop probes the collector
/// (``ResumeProbe``: a connect, no request) every 500 ms and reports each with
/// ``probeEnded(reachable:now:)``; a probe that finds the collector back after one found it down
/// ends the backoff (never before a `Retry-After`). Answered failures keep their backoff.
///
/// Only one delivery loop drives background passes: a loop that attaches later (``Uploader/run(shutdownGrace:)``
/// called while ``Uploader/start()``'s loop runs) takes over, and the earlier one exits after its
/// pass.
struct UploaderScheduler: Sendable {
    enum State: Hashable, Sendable {
        /// Nothing runs; the loop waits for a trigger or the interval.
        case idle
        /// The last background pass failed: none before `until` (a flush still runs at once).
        case backingOff(until: Duration)
        /// The loop runs a background pass; `flushQueued` when a flush waits for it to end.
        case sending(flushQueued: Bool)
        /// A flush runs in its caller's task; later flushes join it.
        case flushing
        /// Shutdown began: it waits for what ran, then drains in its own task.
        case shuttingDown(Draining)
        /// Nothing runs and nothing starts again.
        case stopped
    }

    /// What a shutdown is doing.
    enum Draining: Hashable, Sendable {
        /// For the background pass that was running to end (cancelled at the deadline).
        case waitingForPass
        /// For the flush that was running to end (cancelled at the deadline).
        case waitingForFlush
        /// The final drain runs.
        case draining
    }

    /// How a pass (batches until drained, a failure or the deadline) ended.
    enum PassEnd: Hashable, Sendable {
        /// Drained or nothing to send; `pending` events are in the log now.
        case completed(pending: Int)
        /// Cancelled, or cut off by the deadline.
        case cancelled
        /// Failed: the next attempt at `retryAt` (the backoff, or the collector's `Retry-After`);
        /// `unanswered` when no answer came and the collector can be probed meanwhile.
        case failed(retryAt: Duration, retryAfter: Bool, unanswered: Bool = false)
    }

    /// The delivery loop's next step.
    enum LoopAction: Hashable, Sendable {
        case pass
        /// Probe the collector (a connect, no request), then report ``UploaderScheduler/probeEnded(reachable:now:)``.
        case probe
        /// Sleep until the time (nil: until woken), or until woken.
        case wait(until: Duration?)
        case exit
    }

    enum FlushAction: Hashable, Sendable {
        /// Run the flush in the caller's task, then report ``flushEnded()``.
        case run
        /// Wait for the background pass to end (``PassAction/startQueuedFlush``), then run.
        case waitForPass
        /// Wait for the result of the flush that runs or is queued.
        case join
        /// Shut down: fail at once.
        case refuse
    }

    enum ShutdownAction: Hashable, Sendable {
        /// Drain now (waking the loop, which exits).
        case drain
        /// Wait for the running pass or flush to end (``PassAction/resumeShutdown``), cancelling
        /// it at the deadline; a queued flush is refused. Then drain.
        case waitThenDrain(refuseQueuedFlush: Bool)
        /// Another shutdown runs: wait for its result.
        case join
        /// Already stopped: the kept report.
        case report
    }

    enum PassAction: Hashable, Sendable {
        case none
        /// Let the flush that waited for this pass run.
        case startQueuedFlush
        /// Let the shutdown that waited for this pass or flush drain.
        case resumeShutdown
        /// Wake the loop: it may have work now.
        case wakeLoop
        /// The input cannot happen in this state: report it (``InvalidTransition``).
        case invalid(InvalidTransition)
    }

    enum StopAction: Hashable, Sendable {
        case none
        /// Wake the loop (it exits) and cancel whatever runs; refuse a queued flush.
        case cancel(refuseQueuedFlush: Bool)
    }

    private(set) var state: State = .idle
    /// The delivery loop that drives background passes.
    private(set) var loop = Loop()
    /// The count and interval triggers. Not per state: a trigger that fires while a pass or
    /// flush runs (or while backing off) makes the pass after it due, so it spans every running
    /// state; shutdown and stop clear it.
    private(set) var trigger = Trigger()
    /// The last pass's failure, nil once a pass completes: `backingOff` is entered from it when a
    /// pass or flush ends, and a pass that is cancelled keeps it. (It outlives `backingOff`: a
    /// flush or a retry pass runs with it, and a cancelled one returns to it.)
    private(set) var failure: Failure?
    /// No attempt at all before this: the collector's last `Retry-After`. A fact about the
    /// collector, not a state: it stays after a pass delivers.
    private(set) var retryAfterUntil: Duration = .zero
    /// ``stopRequested()`` came during shutdown: what runs is cancelled and the drain does not
    /// start. Only set in `shuttingDown`, which ends in `stopped`.
    private(set) var stopping = false
    /// ``finishRequested()`` came: no request is written from then on, the answers to those
    /// written are still read (each 2xx acknowledged), and the shutdown skips its drain. Stays set.
    private(set) var sendsNothingNew = false
    /// The probe's settings (interval, timeout); each failure probes with a copy.
    let probing = ResumeProbe()

    /// Where a pass or flush that ended leaves the scheduler: backing off after a failure, else idle.
    private var afterWork: State { failure.map { .backingOff(until: $0.retryAt) } ?? .idle }

    let bulkSize: Int
    let interval: Duration?

    init(bulkSize: Int, interval: Duration?) {
        self.bulkSize = bulkSize
        self.interval = interval
    }

    // MARK: The loop

    /// A delivery loop starts: it takes over from an earlier one, and a first pass is due (events
    /// an earlier run left). Returns its id and whether to wake the loop it replaces.
    mutating func loopStarted(now: Duration) -> (id: UInt64, wakeReplaced: Bool) {
        let (id, replaced) = loop.start()
        if state != .stopped, !isShuttingDown {
            trigger.due = true
            loop.nextTick = interval.map { now + $0 }
        }
        return (id, replaced)
    }

    /// The loop `id` ended (cancelled, replaced or stopped).
    mutating func loopEnded(_ id: UInt64) {
        loop.end(id)
    }

    /// What loop `id` does next, at `now`.
    mutating func loopStep(_ id: UInt64, now: Duration) -> LoopAction {
        guard id == loop.id else { return .exit }
        if let interval, let tick = loop.nextTick, now >= tick {
            loop.nextTick = now + interval
            trigger.due = true
        }
        switch state {
        case .shuttingDown, .stopped:
            return .exit
        case .sending, .flushing:
            return .wait(until: nil)
        case .backingOff(let until):
            var probe = failure?.probe ?? probing
            defer { failure?.probe = probe }
            switch probe.step(now: now, retryAt: until) {
            case .wait(let until): return .wait(until: until)
            case .probe: return .probe
            case .retry:
                probe.ended()
                state = .sending(flushQueued: false)
                trigger.due = false
                return .pass
            }
        case .idle:
            guard trigger.due else { return .wait(until: loop.nextTick) }
            state = .sending(flushQueued: false)
            trigger.due = false
            return .pass
        }
    }

    // MARK: Triggers

    /// The count trigger: `unsent` events wait (appended since the last pass, or pending in the
    /// log). At ``bulkSize`` a pass becomes due, once until it ends.
    mutating func countChanged(unsent: Int) -> PassAction {
        trigger.unsent = unsent
        guard !trigger.armed, unsent >= bulkSize else { return .none }
        switch state {
        case .shuttingDown, .stopped:
            return .none
        case .idle:
            trigger.armed = true
            trigger.due = true
            return .wakeLoop
        case .backingOff, .sending, .flushing:
            trigger.armed = true
            trigger.due = true
            return .none
        }
    }

    // MARK: Passes and flushes

    /// A background pass ended, run by loop `id`.
    mutating func loopPassEnded(_ end: PassEnd, by id: UInt64) -> PassAction {
        note(end)
        switch state {
        case .sending(let flushQueued):
            if flushQueued {
                state = .flushing
                return .startQueuedFlush
            }
            state = afterWork
            // A loop that took over meanwhile waits for this pass to end.
            return id == loop.id ? .none : .wakeLoop
        case .shuttingDown(.waitingForPass):
            state = .shuttingDown(.draining)
            return .resumeShutdown
        case .stopped:
            return .none
        case .idle, .backingOff, .flushing, .shuttingDown(.waitingForFlush), .shuttingDown(.draining):
            // A background pass runs only from `sending`, which only a shutdown or a stop leaves.
            return .invalid(InvalidTransition.failed("UploaderScheduler", state: state, input: "loopPassEnded(\(end))"))
        }
    }

    /// The probe the loop ran ended at `now`: the collector accepted a connection (`reachable`) or
    /// not. The loop asks for its next step again.
    mutating func probeEnded(reachable: Bool, now: Duration) {
        failure?.probe.probed(reachable: reachable, at: now)
    }

    /// A pass of a flush or of the shutdown's drain ended: only the backoff and the count
    /// trigger change.
    mutating func flushPassEnded(_ end: PassEnd) {
        note(end)
    }

    private mutating func note(_ end: PassEnd) {
        switch end {
        case .completed(let pending):
            trigger.unsent = pending
            trigger.armed = pending >= bulkSize
            trigger.due = trigger.armed
            failure = nil
        case .cancelled:
            trigger.armed = false
            failure?.probe.ended()
        case .failed(let retryAt, let retryAfter, let unanswered):
            trigger.armed = true
            if retryAfter { retryAfterUntil = retryAt }
            var probe = probing
            probe.failed(retryAt: retryAt, notBefore: retryAfterUntil, unanswered: unanswered)
            failure = Failure(retryAt: retryAt, probe: probe)
        }
    }

    /// A caller asks for a flush.
    mutating func flushRequested() -> FlushAction {
        switch state {
        case .idle, .backingOff:
            state = .flushing
            return .run
        case .sending(false):
            state = .sending(flushQueued: true)
            return .waitForPass
        case .sending(true), .flushing:
            return .join
        case .shuttingDown, .stopped:
            return .refuse
        }
    }

    /// The running flush ended (its result goes to those who joined it).
    mutating func flushEnded() -> PassAction {
        switch state {
        case .flushing:
            state = afterWork
            return .wakeLoop
        case .shuttingDown(.waitingForFlush):
            state = .shuttingDown(.draining)
            return .resumeShutdown
        case .stopped:
            return .none
        case .idle, .backingOff, .sending, .shuttingDown(.waitingForPass), .shuttingDown(.draining):
            // A flush runs only from `flushing`, which only a shutdown or a stop leaves.
            return .invalid(InvalidTransition.failed("UploaderScheduler", state: state, input: "flushEnded"))
        }
    }

    // MARK: Ending

    /// A caller asks for the final drain.
    mutating func shutdownRequested() -> ShutdownAction {
        switch state {
        case .idle, .backingOff:
            state = .shuttingDown(.draining)
            return .drain
        case .sending(let flushQueued):
            state = .shuttingDown(.waitingForPass)
            return .waitThenDrain(refuseQueuedFlush: flushQueued)
        case .flushing:
            state = .shuttingDown(.waitingForFlush)
            return .waitThenDrain(refuseQueuedFlush: false)
        case .shuttingDown:
            return .join
        case .stopped:
            return .report
        }
    }

    /// A caller stops sending (a signalled sidecar): the shutdown of ``shutdownRequested()``,
    /// the same action in every state, but nothing new is written from now on and the drain is
    /// skipped (``skipsDrain``): what runs only waits for the answers to the requests it wrote.
    mutating func finishRequested() -> ShutdownAction {
        sendsNothingNew = true
        return shutdownRequested()
    }

    /// Whether the shutdown ends without its drain: a stop came during it, or it was asked by
    /// ``finishRequested()``.
    var skipsDrain: Bool { stopping || sendsNothingNew }

    /// The final drain ended.
    mutating func shutdownEnded() {
        state = .stopped
        trigger.due = false
        trigger.armed = false
    }

    /// Stop without uploading (the log is being closed). During a shutdown, the shutdown ends
    /// (without its drain) and then the uploader is stopped.
    mutating func stopRequested() -> StopAction {
        trigger.due = false
        trigger.armed = false
        switch state {
        case .stopped:
            return .none
        case .shuttingDown:
            if stopping { return .none }
            stopping = true
            return .cancel(refuseQueuedFlush: false)
        case .sending(let flushQueued):
            state = .stopped
            return .cancel(refuseQueuedFlush: flushQueued)
        case .idle, .backingOff, .flushing:
            state = .stopped
            return .cancel(refuseQueuedFlush: false)
        }
    }

    /// Whether a pass, flush or drain starting now is cancelled at once.
    var cancelsWork: Bool { state == .stopped || stopping }

    var isShuttingDown: Bool {
        if case .shuttingDown = state { return true }
        return false
    }
}
