import Foundation
import Synchronization
import Testing
@testable import Beacon

/// Diagnostics are rate-limited at the source, whatever the sink: the same diagnostic (kind and
/// subject) at most once per interval, the ones held back counted in the next report. A manual
/// clock: no sleeping.
@Suite struct DiagnosticLimiterTests {
    /// A manual monotonic time and a sink that records.
    final class Harness: Sendable {
        let time = Mutex<Duration>(.seconds(100))
        let reported = Mutex<[BeaconDiagnostic]>([])
        var all: [BeaconDiagnostic] { reported.withLock { $0 } }
        func advance(_ duration: Duration) { time.withLock { $0 += duration } }
        func limiter(_ interval: Duration = .seconds(10)) -> DiagnosticLimiter {
            DiagnosticLimiter(interval: interval, now: { self.time.withLock { $0 } }, sink: { d in self.reported.withLock { $0.append(d) } })
        }
    }

    static func drop(_ n: Int, reason: String = "backpressure") -> BeaconDiagnostic {
        BeaconDiagnostic(kind: .dropped, message: "dropped event \"E\(n)\" (\(reason))", subject: reason)
    }

    @Test func aFloodIsOneReportThenOnePerIntervalWithTheCount() {
        let h = Harness()
        let limiter = h.limiter()
        for i in 0..<50_000 { limiter.report(Self.drop(i)) }
        #expect(h.all.count == 1)
        #expect(h.all[0].message.contains("E0") && h.all[0].suppressed == 0)
        h.advance(.seconds(9))
        limiter.report(Self.drop(50_000))
        #expect(h.all.count == 1, "reported again within the interval")
        h.advance(.seconds(1))
        limiter.report(Self.drop(50_001))
        #expect(h.all.count == 2)
        #expect(h.all[1].message.contains("E50001") && h.all[1].suppressed == 50_000)
        #expect(h.all[1].description.contains("and 50000 more like it"))
    }

    @Test func aQuietSubjectGetsItsSummaryOnceTheIntervalHasPassed() {
        let h = Harness()
        let limiter = h.limiter()
        for i in 0..<5 { limiter.report(Self.drop(i)) }
        h.advance(.seconds(11))
        // Another subject arrives: the first's summary goes out with it (its latest, late).
        limiter.report(BeaconDiagnostic(kind: .storage, message: "EIO"))
        #expect(h.all.map(\.message) == ["dropped event \"E0\" (backpressure)", "dropped event \"E4\" (backpressure)", "EIO"])
        #expect(h.all.map(\.suppressed) == [0, 3, 0])
        // The summary started a new interval for its subject.
        limiter.report(Self.drop(5))
        #expect(h.all.count == 3)
    }

    @Test func subjectsAndKindsAreLimitedApart() {
        let h = Harness()
        let limiter = h.limiter()
        for _ in 0..<3 {
            limiter.report(Self.drop(1, reason: "backpressure"))
            limiter.report(Self.drop(1, reason: "closed"))
            limiter.report(BeaconDiagnostic(kind: .storage, message: "x", subject: "backpressure"))
            // No subject: the message is the subject.
            limiter.report(BeaconDiagnostic(kind: .delivery, message: "paused: 401"))
            limiter.report(BeaconDiagnostic(kind: .delivery, message: "resumed"))
        }
        #expect(h.all.count == 5)
    }

    @Test func flushReportsWhatIsHeldBack() {
        let h = Harness()
        let limiter = h.limiter()
        for i in 0..<3 { limiter.report(Self.drop(i)) }
        limiter.report(Self.drop(0, reason: "closed"))
        limiter.flush()
        #expect(h.all.count == 3, "the closed drop was reported and nothing like it held back: no summary")
        #expect(h.all[2].message.contains("E2") && h.all[2].suppressed == 1)
        limiter.flush()
        #expect(h.all.count == 3)
    }

    @Test func aZeroIntervalPassesEverythingThrough() {
        let h = Harness()
        let limiter = h.limiter(.zero)
        for i in 0..<100 { limiter.report(Self.drop(i)) }
        #expect(h.all.count == 100 && h.all.allSatisfy { $0.suppressed == 0 })
    }

    /// Distinct subjects past the bound share one entry per kind: memory and reports stay bounded.
    @Test func manySubjectsStayBounded() {
        let h = Harness()
        let limiter = h.limiter()
        for i in 0..<10_000 { limiter.report(BeaconDiagnostic(kind: .invalidInput, message: "bad name \(i)")) }
        #expect(h.all.count == DiagnosticLimiter.maxSubjects + 1)
        #expect(limiter.state.withLock { $0.entries.count } == DiagnosticLimiter.maxSubjects + 1)
    }

    /// Property: over random sequences of subjects and clock steps, every diagnostic is reported
    /// or counted exactly once in a later report of its subject, and no subject is reported twice
    /// within one interval.
    @Test(arguments: 0..<40)
    func everyDiagnosticIsReportedOrCounted(seed: Int) {
        var random = SplitMix(seed: UInt64(seed))
        let h = Harness()
        let interval = Duration.seconds(10)
        let limiter = h.limiter(interval)
        let subjects = ["a", "b", "c"]
        var sent: [String: Int] = [:]
        var lastReport: [String: Duration] = [:]
        let steps = Int(random.next() % 400) + 1
        for _ in 0..<steps {
            if random.next() % 4 == 0 { h.advance(.milliseconds(Int64(random.next() % 6000))) }
            let subject = subjects[Int(random.next() % 3)]
            sent[subject, default: 0] += 1
            let before = h.all.count
            limiter.report(BeaconDiagnostic(kind: .dropped, message: subject, subject: subject))
            let now = h.time.withLock { $0 }
            for d in h.all[before...] {
                if let last = lastReport[d.subject!] { #expect(now - last >= interval, "\(d.subject!) twice within \(interval)") }
                lastReport[d.subject!] = now
            }
        }
        limiter.flush()
        var accounted: [String: Int] = [:]
        for d in h.all { accounted[d.subject!, default: 0] += 1 + d.suppressed }
        #expect(accounted == sent)
    }

    /// Through a tracker: a burst of drops on a full hand-off is one diagnostic, and closing
    /// reports the count held back.
    @Test func aTrackerReportsABurstOfDropsOnce() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("beacon-limit-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let diagnostics = DiagnosticsCollector()
        var config = Beacon.Configuration.testing(dir, diagnostics: diagnostics)
        config.handoffBytes = 1
        let clock = TestClock()
        config.monotonicClock = clock
        let beacon = try Beacon(configuration: config)
        beacon.setWriterFrozen(true)
        for i in 0..<1001 { beacon.track("Burst", properties: ["i": .int(i)]) }
        #expect(beacon.stats.dropped == [.backpressure: 1000])
        #expect(diagnostics.all.count == 1)
        #expect(diagnostics.all.first?.subject == "backpressure")
        clock.advance(by: .seconds(10))
        beacon.track("Burst", properties: ["i": 1001])
        #expect(diagnostics.all.count == 2)
        #expect(diagnostics.all.last?.suppressed == 999)
        beacon.track("Burst", properties: ["i": 1002])
        beacon.setWriterFrozen(false)
        await beacon.close()
        #expect(diagnostics.all.map(\.suppressed) == [0, 999, 0], "closing reports the one held back")
    }
}
