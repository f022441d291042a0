import Synchronization

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

/// Lets the same diagnostic (same kind and subject) through at most once per `interval`, counting
/// the ones it holds back; the next one of that subject reported carries the count in
/// ``BeaconDiagnostic/suppressed``. A subject whose interval has passed with some held back and
/// none reported gets a summary: its latest diagnostic, late, with the others' count. Summaries
/// go out when any diagnostic arrives after the interval, or at ``flush()`` (the tracker closing).
///
/// Every diagnostic is reported or counted in a later report's `suppressed`, once flushed.
/// The sink runs outside the lock (it may track, and so report again).
final class DiagnosticLimiter: Sendable {
    struct Key: Hashable {
        var kind: BeaconDiagnostic.Kind
        var subject: String
    }

    struct Entry {
        /// When this subject was last reported.
        var reportedAt: Duration
        /// Held back since then, and the latest of them.
        var suppressed = 0
        var latest: BeaconDiagnostic?
    }

    struct State {
        var entries: [Key: Entry] = [:]
        var lastSweep: Duration
    }

    /// Subjects remembered at once; past it, new subjects share one per kind (a flood of distinct
    /// invalid event names stays bounded in memory and in reports).
    static let maxSubjects = 256

    let interval: Duration
    let now: @Sendable () -> Duration
    let sink: @Sendable (BeaconDiagnostic) -> Void
    let state: Mutex<State>

    init(interval: Duration, now: @escaping @Sendable () -> Duration, sink: @escaping @Sendable (BeaconDiagnostic) -> Void) {
        self.interval = interval
        self.now = now
        self.sink = sink
        self.state = Mutex(State(lastSweep: now()))
    }

    /// Reports `diagnostic` now, or holds it back and counts it.
    func report(_ diagnostic: BeaconDiagnostic) {
        guard interval > .zero else { return sink(diagnostic) }
        let time = now()
        let out = state.withLock { state -> [BeaconDiagnostic] in
            var key = Key(kind: diagnostic.kind, subject: diagnostic.subject ?? diagnostic.message)
            if state.entries[key] == nil && state.entries.count >= Self.maxSubjects {
                key.subject = ""
            }
            // The other subjects' summaries; this one's count goes with this diagnostic.
            var out = time - state.lastSweep >= interval ? sweep(&state, at: time, except: key) : []
            if var entry = state.entries[key], time - entry.reportedAt < interval {
                entry.suppressed += 1
                entry.latest = diagnostic
                state.entries[key] = entry
            } else {
                var reported = diagnostic
                reported.suppressed += state.entries[key]?.suppressed ?? 0
                state.entries[key] = Entry(reportedAt: time)
                out.append(reported)
            }
            return out
        }
        for diagnostic in out { sink(diagnostic) }
    }

    /// Reports a summary for every subject with diagnostics held back, and forgets them all.
    func flush() {
        let out = state.withLock { state -> [BeaconDiagnostic] in
            let out = state.entries.values.compactMap(Self.summary)
            state.entries.removeAll()
            return out
        }
        for diagnostic in out { sink(diagnostic) }
    }

    /// Summaries of the subjects whose interval has passed (each starts a new interval), and
    /// forgets the quiet ones.
    private func sweep(_ state: inout State, at time: Duration, except current: Key) -> [BeaconDiagnostic] {
        state.lastSweep = time
        var out: [BeaconDiagnostic] = []
        for (key, entry) in state.entries where key != current && time - entry.reportedAt >= interval {
            if let summary = Self.summary(entry) {
                out.append(summary)
                state.entries[key] = Entry(reportedAt: time)
            } else {
                state.entries[key] = nil
            }
        }
        return out
    }

    /// The latest diagnostic held back, counting the others; nil when none was.
    private static func summary(_ entry: Entry) -> BeaconDiagnostic? {
        guard entry.suppressed > 0, var latest = entry.latest else { return nil }
        latest.suppressed += entry.suppressed - 1
        return latest
    }
}
