import Synchronization
import Testing
@testable import Beacon

/// The tracker's lifecycle and the uploader's scheduling, every (state, input) pair against a
/// table written out by hand: no tracker, no sockets, no sleeping.
@Suite("Lifecycle: the tracker's and the uploader's state machines over every state and input")
struct LifecycleStateMachineTests {
    // MARK: TrackerLifecycle

    typealias Life = TrackerLifecycle

    static let grace: Duration = .seconds(3)

    /// A lifecycle in `state`, reached through inputs only.
    static func life(in state: Life.State) -> Life {
        var life = Life(runGrace: grace)
        switch state {
        case .open: break
        case .running: _ = life.handle(.run)
        case .ending(.close): _ = life.handle(.close)
        case .ending(.shutdown(let deadline)): _ = life.handle(.shutdown(deadline: deadline))
        case .closed:
            _ = life.handle(.close)
            _ = life.handle(.ended)
        }
        #expect(life.state == state)
        return life
    }

    static let lifeStates: [Life.State] = [.open, .running, .ending(.close), .ending(.shutdown(deadline: .seconds(1))), .closed]
    static let lifeInputs: [Life.Input] = [.run, .runCancelled, .close, .shutdown(deadline: .seconds(7)), .ended]

    /// README's lifecycle table, as data: (state, input) → (action, next state).
    static func expected(_ state: Life.State, _ input: Life.Input) -> (Life.Action, Life.State) {
        switch (state, input) {
        case (.open, .run): return (.deliver, .running)
        case (.open, .runCancelled): return (invalid(state, input), .open)
        case (.open, .close), (.running, .close): return (.end(.close), .ending(.close))
        case (.open, .shutdown(let d)), (.running, .shutdown(let d)): return (.end(.shutdown(deadline: d)), .ending(.shutdown(deadline: d)))
        case (.open, .ended), (.running, .ended): return (invalid(state, input), state)
        case (.running, .run): return (.waitForEnd, .running)
        case (.running, .runCancelled): return (.end(.shutdown(deadline: grace)), .ending(.shutdown(deadline: grace)))
        case (.ending, .run), (.ending, .close), (.ending, .shutdown): return (.waitForEnd, state)
        case (.ending, .runCancelled): return (.none, state)
        case (.ending, .ended): return (.resumeWaiters, .closed)
        case (.closed, .run), (.closed, .close), (.closed, .shutdown): return (.report, .closed)
        case (.closed, .runCancelled): return (.none, .closed)
        case (.closed, .ended): return (invalid(state, input), .closed)
        }
    }

    /// The action of an impossible input: it names the machine, the state and the input.
    static func invalid(_ state: Life.State, _ input: Life.Input) -> Life.Action {
        .invalid(InvalidTransition(machine: "TrackerLifecycle", state: "\(state)", input: "\(input)"))
    }

    /// Runs `body` with invalid transitions recorded instead of stopping the (debug) test run.
    static func recordingInvalidTransitions<T>(_ body: () throws -> T) rethrows -> (T, [InvalidTransition]) {
        let recorded = Mutex<[InvalidTransition]>([])
        let result = try InvalidTransition.$recorder.withValue({ transition in recorded.withLock { $0.append(transition) } }) { try body() }
        return (result, recorded.withLock { $0 })
    }

    @Test("tracker lifecycle: every state × every input gives the table's action and next state", arguments: lifeStates)
    func trackerLifecycleTable(state: Life.State) {
        for input in Self.lifeInputs {
            var life = Self.life(in: state)
            let (action, recorded) = Self.recordingInvalidTransitions { life.handle(input) }
            let (wantAction, wantState) = Self.expected(state, input)
            #expect(action == wantAction, "\(state) + \(input)")
            #expect(life.state == wantState, "\(state) + \(input)")
            // An impossible input fails loudly (the recorder stands in for assertionFailure), once.
            if case .invalid(let transition) = wantAction {
                #expect(recorded == [transition], "\(state) + \(input)")
            } else {
                #expect(recorded.isEmpty, "\(state) + \(input)")
            }
        }
    }

    /// The cells the table marks invalid are exactly these four, and each message names the
    /// machine, the state and the input, for the report a release build makes.
    @Test("tracker lifecycle: an impossible input fails loudly, naming the state and the input")
    func trackerLifecycleInvalidInputsFail() {
        var failed: [String] = []
        for state in Self.lifeStates {
            for input in Self.lifeInputs {
                var life = Self.life(in: state)
                let (_, recorded) = Self.recordingInvalidTransitions { life.handle(input) }
                for transition in recorded {
                    #expect(transition.description.contains("TrackerLifecycle") && transition.description.contains("\(state)") && transition.description.contains("\(input)"))
                    #expect(transition.diagnostic.kind == .internalError)
                    failed.append("\(transition.state) + \(transition.input)")
                }
            }
        }
        #expect(failed == ["open + runCancelled", "open + ended", "running + ended", "closed + ended"])
    }

    /// The ending a sequence of inputs must lead to: the first close or shutdown, or the
    /// cancellation of a run() that came before it.
    static func firstEnding(_ inputs: [Life.Input]) -> Life.Ending? {
        var running = false
        for input in inputs {
            switch input {
            case .run: running = true
            case .runCancelled: if running { return .shutdown(deadline: grace) }
            case .close: return .close
            case .shutdown(let deadline): return .shutdown(deadline: deadline)
            case .ended: break
            }
        }
        return nil
    }

    /// The shell's half: what a release build does instead of stopping. The input changes nothing
    /// and the diagnostics handler hears of it.
    @Test("a tracker fed an impossible input reports an internalError diagnostic and carries on")
    func trackerReportsInvalidTransition() async throws {
        let diagnostics = DiagnosticsCollector()
        try await withTrackerDirectoryOffPool { dir in
            let beacon = try Beacon(configuration: .testing(dir, diagnostics: diagnostics))
            let (action, recorded) = Self.recordingInvalidTransitions { beacon.lifecycle(.ended).action }
            guard case .invalid = action else {
                Issue.record("ended on an open tracker: \(action)")
                return
            }
            #expect(recorded.count == 1)
            let reported = diagnostics.all.filter { $0.kind == .internalError }
            #expect(reported.count == 1 && reported.first?.message.contains("TrackerLifecycle received ended in state open") == true, "\(diagnostics.all)")
            beacon.track("StillOpen")
            beacon.closeNow()
            #expect(try readObjects(dir).count == 1)
        }
    }

    /// Every order of three inputs (endings and runs), with the ending's work done after each
    /// point: one ending at most, the one `firstEnding` names; the others wait for it, or get its
    /// report once it is done; only the first run delivers.
    @Test("tracker lifecycle: in every order of endings and runs the first ending decides, once; the others wait or get its report")
    func everyOrderOfEndings() {
        // A cancellation before any run() is impossible: recorded, and checked below.
        _ = Self.recordingInvalidTransitions { Self.everyOrderOfEndingsBody() }
    }

    static func everyOrderOfEndingsBody() {
        let inputs: [Life.Input] = [.run, .runCancelled, .close, .shutdown(deadline: .seconds(1)), .shutdown(deadline: nil)]
        for a in inputs {
            for b in inputs {
                for c in inputs {
                    for doneAfter in 1...3 {
                        let sequence = [a, b, c]
                        var life = Life(runGrace: Self.grace)
                        var ends: [Life.Ending] = []
                        var done = false
                        var delivering = false
                        for (i, input) in sequence.enumerated() {
                            if i == doneAfter, !ends.isEmpty {
                                #expect(life.handle(.ended) == .resumeWaiters)
                                done = true
                            }
                            switch life.handle(input) {
                            case .end(let ending): ends.append(ending)
                            case .waitForEnd: #expect(!done && (!ends.isEmpty || (input == .run && delivering)), "\(sequence) at \(i)")
                            case .report: #expect(done, "\(sequence) at \(i)")
                            case .deliver:
                                #expect(!delivering && ends.isEmpty, "\(sequence) at \(i)")
                                delivering = true
                            case .none: #expect(input == .runCancelled, "\(sequence) at \(i)")
                            case .invalid: #expect(input == .runCancelled && !delivering && ends.isEmpty, "\(sequence) at \(i)")
                            case .resumeWaiters: Issue.record("only .ended resumes waiters")
                            }
                        }
                        #expect(ends == Self.firstEnding(sequence).map { [$0] } ?? [], "\(sequence)")
                    }
                }
            }
        }
    }

    // MARK: UploaderScheduler

    typealias Scheduler = UploaderScheduler

    enum Named: String, CaseIterable, CustomTestStringConvertible {
        case idle, backingOff, sending, sendingFlushQueued, flushing, waitingForPass, waitingForFlush, draining, stopped
        var testDescription: String { rawValue }
    }

    /// A scheduler (bulk size 10, no interval) in state `named`, with loop 1 attached, reached
    /// through inputs only. `backingOff` waits until 10 s.
    static func scheduler(in named: Named) -> Scheduler {
        var s = Scheduler(bulkSize: 10, interval: nil)
        let id = s.loopStarted(now: .zero).id
        #expect(s.loopStep(id, now: .zero) == .pass)
        _ = s.loopPassEnded(.completed(pending: 0), by: 1)
        switch named {
        case .idle: break
        case .backingOff:
            _ = s.countChanged(unsent: 10)
            _ = s.loopStep(id, now: .zero)
            _ = s.loopPassEnded(.failed(retryAt: .seconds(10), retryAfter: false), by: 1)
        case .sending, .sendingFlushQueued, .waitingForPass:
            _ = s.countChanged(unsent: 10)
            _ = s.loopStep(id, now: .zero)
            if named == .sendingFlushQueued { _ = s.flushRequested() }
            if named == .waitingForPass { _ = s.shutdownRequested() }
        case .flushing, .waitingForFlush:
            _ = s.flushRequested()
            if named == .waitingForFlush { _ = s.shutdownRequested() }
        case .draining: _ = s.shutdownRequested()
        case .stopped: _ = s.stopRequested()
        }
        #expect(s.state == state(named))
        return s
    }

    static func state(_ named: Named) -> Scheduler.State {
        switch named {
        case .idle: .idle
        case .backingOff: .backingOff(until: .seconds(10))
        case .sending: .sending(flushQueued: false)
        case .sendingFlushQueued: .sending(flushQueued: true)
        case .flushing: .flushing
        case .waitingForPass: .shuttingDown(.waitingForPass)
        case .waitingForFlush: .shuttingDown(.waitingForFlush)
        case .draining: .shuttingDown(.draining)
        case .stopped: .stopped
        }
    }

    enum Input: CaseIterable {
        case stepEarly, stepLate, countAtBulk, countBelow, passCompleted, passFailed, passCancelled
        case flush, flushEnded, shutdown, shutdownEnded, stop
    }

    /// Feeds `input` (steps at 5 s and 10 s; a failed pass retries at 20 s); returns the action.
    static func feed(_ s: inout Scheduler, _ input: Input) -> AnyHashable {
        switch input {
        case .stepEarly: s.loopStep(1, now: .seconds(5))
        case .stepLate: s.loopStep(1, now: .seconds(10))
        case .countAtBulk: s.countChanged(unsent: 10)
        case .countBelow: s.countChanged(unsent: 3)
        case .passCompleted: s.loopPassEnded(.completed(pending: 0), by: 1)
        case .passFailed: s.loopPassEnded(.failed(retryAt: .seconds(20), retryAfter: false), by: 1)
        case .passCancelled: s.loopPassEnded(.cancelled, by: 1)
        case .flush: s.flushRequested()
        case .flushEnded: s.flushEnded()
        case .shutdown: s.shutdownRequested()
        case .shutdownEnded: { s.shutdownEnded(); return "nothing" }()
        case .stop: s.stopRequested()
        }
    }

    /// ``feed(_:_:)`` with an impossible input's action (``UploaderScheduler/PassAction/invalid(_:)``)
    /// as "invalid", and whether it failed loudly (recorded, in place of assertionFailure).
    static func feedRecording(_ s: inout Scheduler, _ input: Input) -> (AnyHashable, failed: Bool) {
        let (action, recorded) = recordingInvalidTransitions { feed(&s, input) }
        if let pass = action.base as? Scheduler.PassAction, case .invalid(let transition) = pass {
            #expect(recorded == [transition])
            return ("invalid", true)
        }
        #expect(recorded.isEmpty)
        return (action, false)
    }

    /// The scheduler's table, as data: (state, input) → (action, next state).
    static func expected(_ named: Named, _ input: Input) -> (AnyHashable, Scheduler.State) {
        typealias Loop = Scheduler.LoopAction
        typealias Pass = Scheduler.PassAction
        typealias Flush = Scheduler.FlushAction
        typealias Shutdown = Scheduler.ShutdownAction
        typealias Stop = Scheduler.StopAction
        let state = state(named)
        let shuttingDown = [.waitingForPass, .waitingForFlush, .draining].contains(named)
        switch input {
        case .stepEarly, .stepLate:
            switch named {
            case .idle: return (Loop.wait(until: nil), state)
            case .backingOff: return input == .stepEarly ? (Loop.wait(until: .seconds(10)), state) : (Loop.pass, .sending(flushQueued: false))
            case .sending, .sendingFlushQueued, .flushing: return (Loop.wait(until: nil), state)
            case .waitingForPass, .waitingForFlush, .draining, .stopped: return (Loop.exit, state)
            }
        case .countAtBulk:
            // Only an idle loop needs waking; a pass already armed (sending, backing off) ignores it.
            return (named == .idle ? Pass.wakeLoop : Pass.none, state)
        case .countBelow:
            return (Pass.none, state)
        case .passCompleted, .passFailed, .passCancelled:
            switch named {
            case .sending: return (Pass.none, input == .passFailed ? .backingOff(until: .seconds(20)) : .idle)
            case .sendingFlushQueued: return (Pass.startQueuedFlush, .flushing)
            case .waitingForPass: return (Pass.resumeShutdown, .shuttingDown(.draining))
            case .stopped: return (Pass.none, state)
            // No background pass runs in these states: its end cannot come.
            default: return ("invalid", state)
            }
        case .flush:
            switch named {
            case .idle, .backingOff: return (Flush.run, .flushing)
            case .sending: return (Flush.waitForPass, .sending(flushQueued: true))
            case .sendingFlushQueued, .flushing: return (Flush.join, state)
            case .waitingForPass, .waitingForFlush, .draining, .stopped: return (Flush.refuse, state)
            }
        case .flushEnded:
            switch named {
            case .flushing: return (Pass.wakeLoop, .idle)
            case .waitingForFlush: return (Pass.resumeShutdown, .shuttingDown(.draining))
            case .stopped: return (Pass.none, state)
            // No flush runs in these states: its end cannot come.
            default: return ("invalid", state)
            }
        case .shutdown:
            switch named {
            case .idle, .backingOff: return (Shutdown.drain, .shuttingDown(.draining))
            case .sending: return (Shutdown.waitThenDrain(refuseQueuedFlush: false), .shuttingDown(.waitingForPass))
            case .sendingFlushQueued: return (Shutdown.waitThenDrain(refuseQueuedFlush: true), .shuttingDown(.waitingForPass))
            case .flushing: return (Shutdown.waitThenDrain(refuseQueuedFlush: false), .shuttingDown(.waitingForFlush))
            case .waitingForPass, .waitingForFlush, .draining: return (Shutdown.join, state)
            case .stopped: return (Shutdown.report, state)
            }
        case .shutdownEnded:
            return ("nothing", .stopped)
        case .stop:
            switch named {
            case .stopped: return (Stop.none, .stopped)
            case .sendingFlushQueued: return (Stop.cancel(refuseQueuedFlush: true), .stopped)
            // During a shutdown: it ends without its drain, then stops.
            case _ where shuttingDown: return (Stop.cancel(refuseQueuedFlush: false), state)
            default: return (Stop.cancel(refuseQueuedFlush: false), .stopped)
            }
        }
    }

    @Test("uploader scheduling: every state × every input gives the table's action and next state", arguments: Named.allCases)
    func schedulerTable(named: Named) {
        for input in Input.allCases {
            var s = Self.scheduler(in: named)
            let (action, _) = Self.feedRecording(&s, input)
            let (wantAction, wantState) = Self.expected(named, input)
            #expect(action == wantAction, "\(named) + \(input)")
            #expect(s.state == wantState, "\(named) + \(input)")
        }
    }

    @Test("a loop started later takes over: the earlier one is woken and exits at its next step")
    func loopTakeover() {
        var s = Scheduler(bulkSize: 10, interval: nil)
        let first = s.loopStarted(now: .zero)
        #expect(first.wakeReplaced == false)
        let second = s.loopStarted(now: .zero)
        #expect(second.wakeReplaced == true)
        #expect(s.loopStep(first.id, now: .zero) == .exit)
        #expect(s.loopStep(second.id, now: .zero) == .pass, "the new loop's first pass (events earlier runs left)")
        _ = s.loopPassEnded(.completed(pending: 0), by: second.id)
        // The earlier loop's pass still ran when the new one took over: its end wakes the new one.
        _ = s.countChanged(unsent: 10)
        #expect(s.loopStep(second.id, now: .zero) == .pass)
        let third = s.loopStarted(now: .zero)
        #expect(s.loopStep(third.id, now: .zero) == .wait(until: nil), "a pass runs")
        #expect(s.loopPassEnded(.completed(pending: 0), by: second.id) == .wakeLoop)
        #expect(s.loopStep(third.id, now: .zero) == .wait(until: nil), "the pass that ended drained what was due")
        _ = s.countChanged(unsent: 10)
        #expect(s.loopStep(third.id, now: .zero) == .pass)
        _ = s.loopPassEnded(.completed(pending: 0), by: third.id)
        s.loopEnded(second.id)
        #expect(s.loop.id == third.id, "a replaced loop ending does not detach the new one")
        s.loopEnded(third.id)
        #expect(s.loop.id == 0)
    }

    @Test("the interval: a pass every interval from the loop's start; ticks while backing off do not shorten the backoff")
    func intervalTicks() {
        var s = Scheduler(bulkSize: 100, interval: .seconds(5))
        let id = s.loopStarted(now: .zero).id
        #expect(s.loopStep(id, now: .zero) == .pass)
        _ = s.loopPassEnded(.completed(pending: 0), by: 1)
        #expect(s.loopStep(id, now: .seconds(1)) == .wait(until: .seconds(5)))
        #expect(s.loopStep(id, now: .seconds(5)) == .pass)
        _ = s.loopPassEnded(.failed(retryAt: .seconds(30), retryAfter: false), by: 1)
        #expect(s.loopStep(id, now: .seconds(6)) == .wait(until: .seconds(30)))
        #expect(s.loopStep(id, now: .seconds(11)) == .wait(until: .seconds(30)), "a tick inside the backoff")
        #expect(s.loopStep(id, now: .seconds(30)) == .pass)
        _ = s.loopPassEnded(.completed(pending: 0), by: 1)
        // The retry was the pass the ticks asked for: the next one is an interval after the last tick.
        #expect(s.loopStep(id, now: .seconds(31)) == .wait(until: .seconds(35)))
        #expect(s.loopStep(id, now: .seconds(35)) == .pass)
    }

    @Test("the count trigger fires once per pass: armed until the pass ends, then again only at the bulk size")
    func countTriggerArming() {
        var s = Scheduler(bulkSize: 10, interval: nil)
        let id = s.loopStarted(now: .zero).id
        #expect(s.loopStep(id, now: .zero) == .pass)
        _ = s.loopPassEnded(.completed(pending: 0), by: 1)
        #expect(s.countChanged(unsent: 9) == .none)
        #expect(s.countChanged(unsent: 10) == .wakeLoop)
        #expect(s.countChanged(unsent: 50) == .none, "armed")
        #expect(s.loopStep(id, now: .zero) == .pass)
        #expect(s.countChanged(unsent: 60) == .none, "armed while its pass runs")
        _ = s.loopPassEnded(.completed(pending: 12), by: 1)
        #expect(s.trigger.armed && s.trigger.due, "12 still pending at the pass's end: another pass")
        #expect(s.loopStep(id, now: .zero) == .pass)
        _ = s.loopPassEnded(.completed(pending: 2), by: 1)
        #expect(!s.trigger.armed && !s.trigger.due)
        #expect(s.countChanged(unsent: 10) == .wakeLoop)
    }

    @Test("backoff and Retry-After: a failed pass sets both, a completed one clears the backoff; a flush leaves the state it found")
    func backoffBookkeeping() {
        var s = Scheduler(bulkSize: 10, interval: nil)
        let id = s.loopStarted(now: .zero).id
        #expect(s.loopStep(id, now: .zero) == .pass)
        _ = s.loopPassEnded(.failed(retryAt: .seconds(30), retryAfter: true), by: 1)
        #expect(s.state == .backingOff(until: .seconds(30)) && s.retryAfterUntil == .seconds(30))
        #expect(s.flushRequested() == .run)
        s.flushPassEnded(.failed(retryAt: .seconds(40), retryAfter: false))
        #expect(s.flushEnded() == .wakeLoop)
        #expect(s.state == .backingOff(until: .seconds(40)), "the flush failed too: the loop backs off from its failure")
        #expect(s.flushRequested() == .run)
        s.flushPassEnded(.completed(pending: 0))
        #expect(s.flushEnded() == .wakeLoop)
        #expect(s.state == .idle && s.failure == nil, "delivered: no backoff left")
        #expect(s.retryAfterUntil == .seconds(30), "the collector's Retry-After stays")
        // A retry at once (Retry-After: 0) still retries: the loop is not left idle.
        #expect(s.loopStep(id, now: .seconds(50)) == .wait(until: nil))
        _ = s.countChanged(unsent: 10)
        #expect(s.loopStep(id, now: .seconds(50)) == .pass)
        _ = s.loopPassEnded(.failed(retryAt: .seconds(50), retryAfter: true), by: 1)
        #expect(s.loopStep(id, now: .seconds(50)) == .pass)
    }

    @Test("stop during a shutdown cancels what runs and skips the drain; work started after a stop is cancelled at once")
    func stopCancelsWork() {
        var s = Scheduler(bulkSize: 10, interval: nil)
        #expect(!s.cancelsWork)
        _ = s.shutdownRequested()
        #expect(!s.cancelsWork)
        #expect(s.stopRequested() == .cancel(refuseQueuedFlush: false))
        #expect(s.cancelsWork && s.stopping)
        #expect(s.stopRequested() == .none, "once")
        s.shutdownEnded()
        #expect(s.state == .stopped && s.cancelsWork)
        #expect(s.loopStarted(now: .zero).wakeReplaced == false)
        #expect(!s.trigger.due, "a loop started after the end has nothing due")
    }

    @Test("finishing (a signalled sidecar) is the shutdown in every state, sending nothing new and skipping the drain", arguments: Named.allCases)
    func finishIsShutdownWithoutDrain(named: Named) {
        var shutdown = Self.scheduler(in: named)
        var finish = Self.scheduler(in: named)
        let drains = !shutdown.skipsDrain
        #expect(!finish.sendsNothingNew)
        #expect(finish.finishRequested() == shutdown.shutdownRequested(), "the same action")
        #expect(finish.state == shutdown.state, "the same next state")
        #expect(finish.sendsNothingNew && finish.skipsDrain)
        #expect(!shutdown.sendsNothingNew && shutdown.skipsDrain == !drains, "a plain shutdown drains as before")
    }
}
