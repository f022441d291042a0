/// How many requests may be outstanding on the collector's connection (HTTP/1.1 pipelining), and
/// how that number adapts to the collector, without I/O: the uploader asks ``canSend`` before it
/// writes a request and reports each answer with ``answered(_:now:)``.
///
/// The limit W adapts as Vector's adaptive request concurrency does (additive increase,
/// multiplicative decrease, both decided once per round trip): it starts at 1; at the end of
/// each interval (as long as the average round trip so far) it grows by one when the window was
/// full, nothing pushed back and the interval's average round trip stayed at or below the long
/// average; it shrinks to ⌊0.9 W⌋ (at least 1) when the collector pushed back (429, 503, any
/// retryable answer, a timeout) or the interval's round trip rose above the long average by more
/// than 2.5 of its deviations. Long average and deviation are exponentially weighted (α 0.4).
///
/// A collector that mishandles pipelining (it closes the connection with requests unanswered, or
/// answers `Connection: close` or HTTP/1.0 with requests behind the answer) is told with
/// ``pipeliningFailed(_:)``: from then on the window is one request, for this collector.
///
/// Inputs that cannot happen (a request written with the window full, an answer or a forget
/// with fewer in flight) fail loudly through ``InvalidTransition`` and change nothing: the
/// uploader reports what they return.
struct RequestWindow: Sendable, Equatable {
    /// What the collector did with a request.
    enum Outcome: Equatable, Sendable {
        /// Accepted (2xx), after `rtt`: the request's time from written to answered.
        case accepted(rtt: Duration)
        /// A retryable answer or none in time (429, 503, other 5xx, 408, a timeout): back pressure.
        case pushedBack
        /// Any other outcome (refused, a network error): no measurement, no back pressure.
        case other
    }

    /// The configured maximum (1: one request at a time).
    let maximum: Int
    /// The current limit, 1...maximum.
    private(set) var limit = 1
    /// Requests written and not answered.
    private(set) var inFlight = 0
    /// Why pipelining was given up for this collector, once it was.
    private(set) var pipeliningRefused: String?
    /// The long average round trip (seconds) and its variance; nil before the first measurement.
    private(set) var pastMean: Double?
    private(set) var pastVariance: Double = 0
    /// The interval's round trips.
    private var currentSum: Double = 0
    private var currentCount = 0
    /// When the interval ends (monotonic time).
    private var intervalEnd: Duration = .zero
    /// The window was full during the interval.
    private var reachedLimit = false
    /// The collector pushed back during the interval.
    private var pushedBack = false

    static let decreaseRatio = 0.9
    static let alpha = 0.4
    static let deviationScale = 2.5

    init(maximum: Int) {
        precondition(maximum > 0, "the window holds at least one request")
        self.maximum = maximum
    }

    /// The requests that may be outstanding now: the limit, or one once pipelining failed.
    var effectiveLimit: Int { pipeliningRefused == nil ? limit : 1 }

    /// Whether another request may be written now.
    var canSend: Bool { inFlight < effectiveLimit }

    /// A request was written. With the window full it cannot have been: an invalid transition
    /// (returned for the uploader to report; nothing changes).
    mutating func sent() -> InvalidTransition? {
        guard canSend else { return invalid("sent()") }
        inFlight += 1
        if inFlight >= limit { reachedLimit = true }
        return nil
    }

    /// The oldest request in flight was answered (or failed) at `now`. With none in flight it
    /// cannot have been: an invalid transition (nothing changes).
    mutating func answered(_ outcome: Outcome, now: Duration) -> InvalidTransition? {
        guard inFlight > 0 else { return invalid("answered(\(outcome))") }
        inFlight -= 1
        adapt(outcome, now: now)
        return nil
    }

    private mutating func adapt(_ outcome: Outcome, now: Duration) {
        switch outcome {
        case .accepted(let rtt):
            currentSum += max(0, Double(rtt.components.seconds) + Double(rtt.components.attoseconds) * 1e-18)
            currentCount += 1
        case .pushedBack:
            pushedBack = true
        case .other:
            break
        }
        guard let mean = pastMean else {
            // The first measurement starts the long average and the first interval.
            if currentCount > 0 {
                let first = currentSum / Double(currentCount)
                pastMean = first
                intervalEnd = now + .seconds(first)
                resetInterval()
            } else if pushedBack {
                decrease()
                resetInterval()
            }
            return
        }
        guard now >= intervalEnd else { return }
        let current = currentCount > 0 ? currentSum / Double(currentCount) : nil
        let threshold = pastVariance.squareRoot() * Self.deviationScale
        if limit < maximum && reachedLimit && !pushedBack, let current, current <= mean {
            limit += 1
        } else if pushedBack || current.map({ $0 > mean && $0 >= mean + threshold }) == true {
            decrease()
        }
        if let current { update(current) }
        intervalEnd = now + .seconds(pastMean ?? mean)
        resetInterval()
    }

    /// Requests in flight ended without an answer that says anything about them (the connection
    /// was dropped after a failure, or the pass was cancelled): they leave the window.
    /// Forgetting more than are in flight is an invalid transition (nothing changes).
    mutating func forget(_ count: Int) -> InvalidTransition? {
        guard (0...inFlight).contains(count) else { return invalid("forget(\(count))") }
        inFlight -= count
        return nil
    }

    /// The state as an invalid transition names it.
    var summary: String { "limit \(limit) of \(maximum), \(inFlight) in flight\(pipeliningRefused == nil ? "" : ", pipelining refused")" }

    private func invalid(_ input: String) -> InvalidTransition {
        InvalidTransition.failed("RequestWindow", state: summary, input: input)
    }

    /// Connections in a row that ended with requests unanswered before serving twice the window.
    private(set) var earlyEnds = 0
    /// Early ends in a row after which pipelining is given up: one is what a collector going down
    /// or restarting does too; a collector that mishandles pipelining does it every time.
    static let earlyEndsBeforeFallback = 3

    /// A connection ended with requests unanswered after `answered` answers (HTTP/1.0,
    /// `Connection: close`, a close). Fewer than twice the limit, `earlyEndsBeforeFallback` times
    /// in a row, means the collector mishandles pipelining (or allows too few requests per
    /// connection for it): one request at a time from then on. Returns true when it falls back.
    mutating func connectionEnded(after answered: Int, _ reason: String) -> Bool {
        guard pipeliningRefused == nil else { return false }
        guard answered < 2 * limit else {
            earlyEnds = 0
            return false
        }
        earlyEnds += 1
        guard earlyEnds >= Self.earlyEndsBeforeFallback else { return false }
        pipeliningFailed(reason)
        return true
    }

    /// A connection answered twice the limit: early ends before it were not the collector's way.
    mutating func connectionServed() {
        earlyEnds = 0
    }

    /// The collector mishandled pipelining: one request at a time from now on.
    mutating func pipeliningFailed(_ reason: String) {
        if pipeliningRefused == nil { pipeliningRefused = reason }
        limit = 1
    }

    private mutating func decrease() {
        limit = max(1, Int((Double(limit) * Self.decreaseRatio).rounded(.down)))
    }

    private mutating func update(_ sample: Double) {
        guard let mean = pastMean else { pastMean = sample; return }
        let difference = sample - mean
        let increment = Self.alpha * difference
        pastMean = mean + increment
        pastVariance = (1 - Self.alpha) * (pastVariance + difference * increment)
    }

    private mutating func resetInterval() {
        currentSum = 0
        currentCount = 0
        reachedLimit = inFlight >= limit
        pushedBack = false
    }
}
