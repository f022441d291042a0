import BeaconHTTP

/// The decisions of delivering one batch, without I/O: which events to send next, what a
/// collector's answer means for them, when an event is set aside, and when a pass stops.
///
/// The uploader reads a batch, makes a machine for it, and then loops: it asks ``nextAction()``,
/// performs the action (send a request, write `rejected.jsonl` and acknowledge, or end the pass)
/// and reports each request's outcome with ``received(_:)``. The machine never sleeps, reads a
/// clock or touches a file, so every case can be tested by feeding it outcomes.
///
/// Events are indices `0..<count` of the batch. The batch is cut into segments, each a range of
/// events sent as one request; a segment is untried, failed (a retryable answer), delivered (2xx),
/// or set aside. The leading delivered or set-aside segments are committed (acknowledged) in order.
///
/// The rules:
/// - 2xx delivers a segment. 413 (`split`) and 400/422 (`reject`) halve it; a single event still
///   too large is set aside at once. A single event refused (400/422) is set aside only with proof
///   that the collector accepts other data from this client now (a 2xx in this pass): until then
///   the segments after it are sent as probes. A collector that refuses everything (nginx's "400
///   No required SSL certificate was sent", `http://` to an https port) is a configuration
///   problem, not bad data: after ``failureBudget`` refusals without a 2xx the pass pauses, and
///   nothing is set aside.
/// - A retryable answer (5xx, 408, 429, timeout, network error) ends the pass, which is retried
///   later with backoff, until `isolateAfter` passes at this batch have failed with an answer (a
///   pass that got none, a refused or reset connection or a timeout, does not count). From then on the
///   batch is isolated: a failing segment with only failed single events before it is halved,
///   depth first, in order; when the front is a single event that failed, the segments after it
///   are sent as probes. A 2xx proves the collector up; a single event that has failed
///   `isolateAfter` times while the collector is proven up is set aside with the answer it got,
///   and each set-aside uses up the proof. Only answers of this pass count towards that: failures
///   recorded by an earlier run, failures without an answer (connection refused, a timeout: they
///   also end the proof) and failures in a pass that never proved the collector up count for
///   nothing. While nothing succeeds (an outage) nothing is set aside: after a bounded number of failures (``failureBudget``) the pass stops and is retried
///   with backoff, starting again at the front, so events are delivered in order when the
///   collector comes back.
/// - Any other answer (`pause`: 401, 403, 404, other 4xx) ends the pass and keeps everything.
struct DeliveryStateMachine: Sendable {
    /// What a collector's answer (or its absence) asks for; see ``AnswerAction``.
    typealias Verdict = AnswerAction

    /// What is kept of an answer for reports and `rejected.jsonl`.
    struct Answer: Equatable, Sendable {
        /// The HTTP status; nil when no answer came (timeout, network error).
        var status: Int?
        /// The start of the answer's body, or the transport's message when no answer came.
        var detail: String
        /// The collector's `Retry-After`, as a wait.
        var retryAfter: Duration?
        /// The transport's error when no answer came.
        var cause: TransportError?

        init(status: Int?, detail: String = "", retryAfter: Duration? = nil, cause: TransportError? = nil) {
            self.status = status
            self.detail = detail
            self.retryAfter = retryAfter
            self.cause = cause
        }

        static func == (a: Answer, b: Answer) -> Bool {
            a.status == b.status && a.detail == b.detail && a.retryAfter == b.retryAfter
                && a.cause?.code == b.cause?.code && a.cause?.message == b.cause?.message
        }
    }

    /// An event to write to `rejected.jsonl` before the acknowledgement that passes over it.
    struct SetAside: Equatable, Sendable {
        enum Reason: Equatable, Sendable {
            /// 413 (or `split`) for the event alone.
            case tooLarge
            /// 400, 422 (or `reject`) for the event alone.
            case refused
            /// A retryable answer `isolateAfter` times for the event alone while others succeeded.
            case keepsFailing
        }
        var index: Int
        var reason: Reason
        var answer: Answer
    }

    /// Why a pass stops before the batch is committed.
    enum Stop: Equatable, Sendable {
        /// A retryable answer: back off (or wait for `Retry-After`) and try again.
        case retry(Answer)
        /// A configuration problem: pause with backoff, report, keep everything.
        case pause(Answer)
        /// Every request of the pass, down to single events, was refused (400, 422) and none
        /// accepted: the collector refuses this client, not its data. Pause as for ``pause(_:)``.
        case refusedEverything(Answer)
    }

    enum Action: Equatable, Sendable {
        /// Send events `range` with `X-Beacon-Retry: retry` (earlier sends of this exact range).
        case send(Range<Int>, retry: Int)
        /// Write `setAside` to `rejected.jsonl`, then acknowledge events `0..<through`.
        case commit(through: Int, setAside: [SetAside])
        /// Every event of the batch is committed.
        case finished
        /// End the pass; the uncommitted events stay pending.
        case stop(Stop)
    }

    struct Segment: Equatable, Sendable {
        enum State: Equatable, Sendable {
            case untried, failed, delivered, setAside(SetAside)
            /// A single event refused (400, 422) before anything proved the collector up: set
            /// aside at the next 2xx of the pass, sent again in the next pass.
            case refused(SetAside)
        }
        var range: Range<Int>
        var state: State = .untried
        /// Times this exact range was sent.
        var sends = 0
        /// Retryable answers for this exact range, in a row, that count towards setting it aside:
        /// received while the collector was proven up (or followed by a 2xx in the same pass).
        var failures = 0
        /// Retryable answers for this range in this pass not yet followed by a 2xx: they count
        /// once one comes, and for nothing if the pass ends first.
        var unprovenFailures = 0
        /// The last retryable answer for this range.
        var lastAnswer: Answer?
    }

    /// The events in the batch.
    let count: Int
    /// Failed passes at the batch before it is isolated (at least 1).
    let isolateAfter: Int
    /// The segments not yet committed, in order; they cover `committed..<count`.
    private(set) var segments: [Segment]
    /// Events `0..<committed` are acknowledged.
    private(set) var committed = 0
    /// Passes at this batch that ended with a retryable answer (not a failure without one).
    private(set) var failedPasses: Int
    /// A 2xx came in this pass, since the batch was isolated, since the last event was set aside
    /// as failing and since the last request that got no answer.
    private(set) var proven = false
    /// The last pass ended with every request refused (``Stop/refusedEverything(_:)``).
    private(set) var refusedEverything = false
    /// Retryable answers in this pass since the last 2xx.
    private(set) var failuresWithoutProof = 0
    /// The segment being sent, awaiting ``received(_:)``.
    private(set) var inFlight: Int?
    private var pendingStop: Stop?

    /// A machine for a batch of `count` events (at least one).
    ///
    /// - Parameters:
    ///   - count: the events in the batch.
    ///   - earlierSends: times the whole batch was already sent without being acknowledged (by an
    ///     earlier process, from `delivery.inflight`): the first send's `X-Beacon-Retry`.
    ///   - earlierFailures: passes at the batch that ended with a retryable answer. Only answers
    ///     count: a send whose answer was never seen (the process was killed) is no evidence
    ///     against the batch, so a crash loop re-sends the batch whole, with the same key. They
    ///     resume the isolation (the bisection), never count towards setting an event aside.
    ///   - isolateAfter: failed passes at the batch before it is isolated.
    ///   - proven: a 2xx of this process's current pass proved the collector up before this
    ///     machine was made (an earlier machine for the same events whose commit failed on
    ///     storage, not on the collector).
    init(count: Int, earlierSends: Int = 0, earlierFailures: Int = 0, isolateAfter: Int, proven: Bool = false) {
        precondition(count > 0, "a batch holds at least one event")
        precondition(isolateAfter > 0, "isolateAfter must be positive")
        self.count = count
        self.isolateAfter = isolateAfter
        self.failedPasses = earlierFailures
        self.segments = [Segment(range: 0..<count, sends: earlierSends)]
        if isolating { beginIsolation() }
        self.proven = proven
    }

    /// True once `isolateAfter` passes at this batch have failed.
    var isolating: Bool { failedPasses >= isolateAfter }

    /// The retryable answers without a 2xx after which an isolating pass stops: enough to reach
    /// a single event by bisection and probe past it (2⌈log₂ count⌉ + 2), times the isolating
    /// passes so far, so that a long run of bad events is crossed over a few passes while an
    /// outage costs few requests per pass.
    var failureBudget: Int {
        let log2 = count <= 1 ? 0 : Int.bitWidth - (count - 1).leadingZeroBitCount
        return (2 * log2 + 2) * max(1, failedPasses - isolateAfter + 1)
    }

    /// The events that a restart must read again to resume this batch, counted from `committed`,
    /// and the earlier sends to record with them: the request in flight when it starts at the
    /// committed position (so a restart re-sends the same request), else the rest of the batch
    /// with its failed passes (so a restart resumes the isolation).
    var resumePoint: (count: Int, sends: Int) {
        if !isolating, let i = inFlight ?? segments.indices.first, segments[i].range.lowerBound == committed {
            return (segments[i].range.upperBound - committed, segments[i].sends)
        }
        return (count - committed, failedPasses)
    }

    /// The failed passes to record with ``resumePoint``, so that a restart goes on isolating a
    /// batch the collector kept failing, and only such a batch.
    var resumeFailures: Int { failedPasses }

    /// Whether an event waits for a 2xx that this batch may not be able to give (an isolated
    /// batch not proven, or an event refused without proof): the uploader reads a longer batch
    /// when more events are pending, so that the events after it can prove the collector up.
    var awaitsProof: Bool {
        !proven && (isolating || refusedEverything || segments.contains { if case .refused = $0.state { true } else { false } })
    }

    // MARK: Decisions

    /// What to do next. After a `.send`, call ``received(_:)`` before asking again.
    mutating func nextAction() -> Action {
        precondition(inFlight == nil, "nextAction() while a request is in flight")
        while true {
            if let commit = commitResolvedPrefix() { return commit }
            if let stop = pendingStop {
                pendingStop = nil
                endPass()
                return .stop(stop)
            }
            guard let front = segments.first else { return .finished }
            if front.state == .untried { return send(0) }
            if case .refused(let aside) = front.state {
                // Refused before anything proved the collector up (a 2xx makes it a set-aside).
                if failuresWithoutProof < failureBudget, let probe = segments.firstIndex(where: { $0.state == .untried }) {
                    return send(probe)
                }
                // Everything this pass sent was refused: the collector refuses this client, not
                // this data. Keep everything and pause, as for 401.
                endPass()
                refusedEverything = true
                return .stop(.refusedEverything(aside.answer))
            }
            // The front failed with a retryable answer: only an isolated batch gets here (a batch
            // not isolated ends its pass at the first such answer).
            guard isolating else {
                let answer = front.lastAnswer ?? Answer(status: nil)
                endPass()
                return .stop(.retry(answer))
            }
            if front.range.count > 1 {
                halve(0)
                continue
            }
            if proven {
                if front.failures >= isolateAfter {
                    let aside = SetAside(index: front.range.lowerBound, reason: .keepsFailing, answer: front.lastAnswer ?? Answer(status: nil))
                    segments[0].state = .setAside(aside)
                    proven = false
                    continue
                }
                return send(0)
            }
            // Is the collector up? Probe with the next untried segment.
            if failuresWithoutProof < failureBudget, let probe = segments.firstIndex(where: { $0.state == .untried }) {
                return send(probe)
            }
            // Nothing succeeded: an outage, as far as can be told.
            let answer = front.lastAnswer ?? Answer(status: nil)
            endPass()
            return .stop(.retry(answer))
        }
    }

    /// Records the answer to the request in flight.
    mutating func received(_ verdict: Verdict, _ answer: Answer = Answer(status: nil)) {
        guard let i = inFlight else { preconditionFailure("received(_:) without a request in flight") }
        inFlight = nil
        switch verdict {
        case .acknowledge:
            segments[i].state = .delivered
            segments[i].failures = 0
            proven = true
            refusedEverything = false
            failuresWithoutProof = 0
            // The collector accepts data from this client now: what it refused or failed earlier
            // in this pass was about the data.
            for j in segments.indices {
                if case .refused(let aside) = segments[j].state { segments[j].state = .setAside(aside) }
                segments[j].failures += segments[j].unprovenFailures
                segments[j].unprovenFailures = 0
            }
        case .split:
            if segments[i].range.count > 1 {
                halve(i)
            } else {
                segments[i].state = .setAside(SetAside(index: segments[i].range.lowerBound, reason: .tooLarge, answer: answer))
            }
        case .reject:
            if !proven { failuresWithoutProof += 1 }
            if segments[i].range.count > 1 {
                halve(i)
            } else {
                let aside = SetAside(index: segments[i].range.lowerBound, reason: .refused, answer: answer)
                segments[i].state = proven ? .setAside(aside) : .refused(aside)
            }
        case .retry:
            segments[i].state = .failed
            segments[i].lastAnswer = answer
            failuresWithoutProof += 1
            if answer.status == nil {
                // No answer (connection refused, reset, a timeout): the collector is not provably
                // up now, and this is no evidence against the events.
                proven = false
            } else if proven {
                segments[i].failures += 1
            } else {
                segments[i].unprovenFailures += 1
            }
            if !isolating {
                pendingStop = .retry(answer)
            } else if segments[i].range.count > 1 && segments[..<i].allSatisfy({ $0.state == .failed && $0.range.count == 1 }) {
                // Only failed single events before it: halve it now, so the search stays in order.
                halve(i)
            }
        case .pause:
            segments[i].state = .untried
            pendingStop = .pause(answer)
        }
    }

    /// Forgets the request in flight without an answer: it was not sent (no time left before the
    /// deadline) or was cancelled (it may have arrived; it counts as sent).
    mutating func abandon(sent: Bool) {
        guard let i = inFlight else { preconditionFailure("abandon(sent:) without a request in flight") }
        inFlight = nil
        if !sent { segments[i].sends -= 1 }
    }

    // MARK: Steps

    private mutating func send(_ i: Int) -> Action {
        let retry = segments[i].sends
        segments[i].sends += 1
        inFlight = i
        return .send(segments[i].range, retry: retry)
    }

    /// Replaces segment `i` by its two halves (the first half the smaller one for odd counts).
    private mutating func halve(_ i: Int) {
        let range = segments[i].range
        let middle = range.lowerBound + range.count / 2
        segments.replaceSubrange(i...i, with: [Segment(range: range.lowerBound..<middle), Segment(range: middle..<range.upperBound)])
    }

    /// The commit of the leading delivered and set-aside segments, if any.
    private mutating func commitResolvedPrefix() -> Action? {
        var through = committed
        var setAside: [SetAside] = []
        var resolved = 0
        for segment in segments {
            if segment.state == .delivered {
                through = segment.range.upperBound
            } else if case .setAside(let aside) = segment.state {
                setAside.append(aside)
                through = segment.range.upperBound
            } else {
                break
            }
            resolved += 1
        }
        guard resolved > 0 else { return nil }
        segments.removeFirst(resolved)
        committed = through
        return .commit(through: through, setAside: setAside)
    }

    /// Ends a pass: every failed segment is tried again in the next one, and a retryable failure
    /// counts towards isolating the batch.
    private mutating func endPass() {
        failuresWithoutProof = 0
        // The next pass proves the collector up again before anything is set aside.
        proven = false
        // Only a failure with an answer (5xx, 408, 429) counts towards isolating the batch: a
        // request that got none (connection refused or reset, a cut body, a timeout) says nothing
        // about its events, and such failures never set an event aside either, so isolating on
        // them only sent later events ahead of the front as probes (first arrivals out of order,
        // seen by beacon-chaos: 882 cut, 883 503, 884 accepted, then 882).
        let retryable = segments.contains { $0.state == .failed && $0.lastAnswer?.status != nil }
        for i in segments.indices {
            segments[i].unprovenFailures = 0
            switch segments[i].state {
            case .failed, .refused: segments[i].state = .untried
            default: break
            }
        }
        guard retryable else { return }
        let wasIsolating = isolating
        failedPasses += 1
        if !wasIsolating && isolating { beginIsolation() }
    }

    /// Halves the front segment when it spans more than one event, so the next pass starts the
    /// search for the event that keeps failing.
    private mutating func beginIsolation() {
        proven = false
        if let front = segments.first, front.range.count > 1, front.state != .delivered { halve(0) }
    }
}
