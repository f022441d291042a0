import Foundation
import BeaconTestSupport
import Testing
@testable import Beacon
import BeaconLog
import BeaconTesting
import BeaconHTTPServer

/// Prompt resume (issue 27, part 3): the probe's rules, the scheduler's loop with them, and the
/// uploader with a collector that goes away and comes back.
@Suite("Resume: probing the collector while backing off", .timeLimit(.minutes(1)))
struct ResumeProbeTests {
    typealias Probe = ResumeProbe

    /// Runs a backoff to its end against a collector that is down until `back` and up from then
    /// on, each probe taking `probeTakes`; returns when delivery is attempted again and the probes run.
    static func resumeTime(back: Duration, retryAt: Duration, notBefore: Duration, probeTakes: Duration, interval: Duration = .milliseconds(500)) -> (at: Duration, probes: Int) {
        var p = Probe(interval: interval)
        p.failed(retryAt: retryAt, notBefore: notBefore, unanswered: true)
        var now = Duration.zero
        var probes = 0
        while true {
            switch p.step(now: now, retryAt: retryAt) {
            case .retry: return (now, probes)
            case .probe:
                probes += 1
                let reachable = now >= back
                now += probeTakes
                p.probed(reachable: reachable, at: now)
            case .wait(let until):
                precondition(until > now, "a wait must move time forward (\(until) at \(now))")
                now = until
            }
            precondition(probes < 100_000)
        }
    }

    @Test("every return time 0…25 s by 100 ms, Retry-After and backoff end: resume within an interval and a probe of the return, never before a Retry-After, at the backoff's end at the latest",
          arguments: [Duration.zero, .seconds(5), .seconds(30)], [Duration.seconds(3), .seconds(300)])
    func everyReturnTime(notBefore: Duration, retryAt: Duration) {
        for tenths in 0...250 {
            let back = Duration.milliseconds(100 * tenths)
            for probeTakes in [Duration.milliseconds(1), .milliseconds(300)] {
                let (at, _) = Self.resumeTime(back: back, retryAt: retryAt, notBefore: notBefore, probeTakes: probeTakes)
                let label = "back \(back), Retry-After until \(notBefore), backoff until \(retryAt), probe \(probeTakes)"
                #expect(at <= retryAt + probeTakes, "the backoff's end is never delayed: \(label), resumed at \(at)")
                if back == .zero {
                    // Back before the first probe: never seen down, so the backoff runs out.
                    #expect(at >= retryAt, "\(label): resumed at \(at)")
                    continue
                }
                if at < retryAt {
                    #expect(at >= back, "never before the collector is back: \(label), resumed at \(at)")
                    #expect(at >= notBefore, "a probe never shortens a Retry-After: \(label), resumed at \(at)")
                }
                let promptly = max(back + .milliseconds(500) + probeTakes * 2, notBefore)
                #expect(at <= min(retryAt + probeTakes, promptly), "\(label): resumed at \(at)")
            }
        }
    }

    @Test("an answered failure (5xx, 429, a configuration problem) keeps its backoff: no probe")
    func answeredKeepsBackoff() {
        var p = Probe()
        p.failed(retryAt: .seconds(60), unanswered: false)
        #expect(p.backoff == nil)
        #expect(p.step(now: .zero, retryAt: .seconds(60)) == .wait(until: .seconds(60)))
        #expect(p.step(now: .seconds(59), retryAt: .seconds(60)) == .wait(until: .seconds(60)))
        #expect(p.step(now: .seconds(60), retryAt: .seconds(60)) == .retry)
        // An unanswered failure, then an answered one: the answer wins, probing stops.
        p.failed(retryAt: .seconds(60), unanswered: true)
        #expect(p.step(now: .zero, retryAt: .seconds(60)) == .probe)
        p.failed(retryAt: .seconds(90), unanswered: false)
        #expect(p.step(now: .seconds(1), retryAt: .seconds(90)) == .wait(until: .seconds(90)))
    }

    @Test("a collector that accepts connections but fails requests is never retried faster than its backoff")
    func reachableWithoutOutage() {
        let (at, probes) = Self.resumeTime(back: .zero, retryAt: .seconds(300), notBefore: .zero, probeTakes: .milliseconds(2))
        #expect(at == .seconds(300))
        #expect(probes > 500, "it still probes, in case the collector goes down and comes back")
    }

    @Test("one probe at a time: while it runs, the step waits for the backoff's end")
    func oneProbeAtATime() {
        var p = Probe()
        p.failed(retryAt: .seconds(60), unanswered: true)
        #expect(p.step(now: .zero, retryAt: .seconds(60)) == .probe)
        #expect(p.step(now: .milliseconds(10), retryAt: .seconds(60)) == .wait(until: .seconds(60)))
        p.probed(reachable: false, at: .milliseconds(20))
        #expect(p.step(now: .milliseconds(20), retryAt: .seconds(60)) == .wait(until: .milliseconds(520)))
        #expect(p.step(now: .milliseconds(520), retryAt: .seconds(60)) == .probe)
        p.probed(reachable: true, at: .milliseconds(530))
        #expect(p.step(now: .milliseconds(530), retryAt: .seconds(60)) == .retry)
        // A result after the backoff was ended (a flush delivered meanwhile) changes nothing.
        p.ended()
        p.probed(reachable: true, at: .seconds(1))
        #expect(p.backoff == nil)
    }

    @Test("a probe's stale end (its backoff replaced by a flush's new failure before any probe was asked for) changes nothing")
    func staleProbeOfAReplacedBackoff() {
        var p = Probe()
        p.failed(retryAt: .seconds(60), unanswered: true)
        #expect(p.step(now: .zero, retryAt: .seconds(60)) == .probe)
        p.probed(reachable: false, at: .milliseconds(10))
        #expect(p.step(now: .milliseconds(510), retryAt: .seconds(60)) == .probe)
        // While that probe runs, a flush fails again without an answer: a new backoff.
        p.failed(retryAt: .seconds(120), unanswered: true)
        let fresh = p
        // The old probe ends, the collector reachable: for the new backoff it proves nothing
        // (no probe of it saw the collector down), and the new backoff's first probe stays due.
        p.probed(reachable: true, at: .milliseconds(520))
        #expect(p == fresh)
        #expect(p.step(now: .milliseconds(520), retryAt: .seconds(120)) == .probe)
    }

    @Test("a probe that finds the collector back while a Retry-After is pending resumes when the Retry-After ends")
    func comesBackDuringRetryAfter() {
        var p = Probe()
        p.failed(retryAt: .seconds(60), notBefore: .seconds(10), unanswered: true)
        #expect(p.step(now: .zero, retryAt: .seconds(60)) == .probe)
        p.probed(reachable: false, at: .zero)
        #expect(p.step(now: .milliseconds(500), retryAt: .seconds(60)) == .probe)
        p.probed(reachable: true, at: .milliseconds(500))
        #expect(p.step(now: .milliseconds(500), retryAt: .seconds(60)) == .wait(until: .seconds(10)))
        #expect(p.step(now: .seconds(9), retryAt: .seconds(60)) == .wait(until: .seconds(10)), "no more probes: it came back")
        #expect(p.step(now: .seconds(10), retryAt: .seconds(60)) == .retry)
    }

    @Test("a flapping collector: each backoff needs a probe to see it down before one sees it back")
    func flapping() {
        var p = Probe()
        var now = Duration.zero
        for round in 0..<5 {
            p.failed(retryAt: now + .seconds(300), unanswered: true)
            #expect(p.step(now: now, retryAt: now + .seconds(300)) == .probe)
            // Up again at once (it flapped between the request and the probe): not seen down.
            p.probed(reachable: true, at: now)
            now += .milliseconds(500)
            #expect(p.step(now: now, retryAt: now + .seconds(300)) == .probe, "round \(round)")
            p.probed(reachable: false, at: now)
            now += .milliseconds(500)
            #expect(p.step(now: now, retryAt: now + .seconds(300)) == .probe)
            p.probed(reachable: true, at: now)
            #expect(p.step(now: now, retryAt: now + .seconds(300)) == .retry, "round \(round)")
        }
    }

    // MARK: The scheduler

    @Test("the loop backing off after a connection failure probes, and passes once the collector is back")
    func schedulerProbes() {
        var s = UploaderScheduler(bulkSize: 10, interval: nil)
        let id = s.loopStarted(now: .zero).id
        #expect(s.loopStep(id, now: .zero) == .pass)
        _ = s.loopPassEnded(.failed(retryAt: .seconds(300), retryAfter: false, unanswered: true), by: id)
        #expect(s.state == .backingOff(until: .seconds(300)))
        #expect(s.loopStep(id, now: .seconds(1)) == .probe)
        #expect(s.loopStep(id, now: .seconds(1)) == .wait(until: .seconds(300)), "one probe at a time")
        s.probeEnded(reachable: false, now: .seconds(1))
        #expect(s.loopStep(id, now: .seconds(1)) == .wait(until: .milliseconds(1500)))
        #expect(s.loopStep(id, now: .milliseconds(1500)) == .probe)
        s.probeEnded(reachable: true, now: .milliseconds(1501))
        #expect(s.loopStep(id, now: .milliseconds(1501)) == .pass)
        #expect(s.state == .sending(flushQueued: false))
        _ = s.loopPassEnded(.completed(pending: 0), by: id)
        #expect(s.failure?.probe.backoff == nil && s.state == .idle)
    }

    @Test("the loop backing off after an answered failure waits its backoff without probing")
    func schedulerAnswered() {
        var s = UploaderScheduler(bulkSize: 10, interval: nil)
        let id = s.loopStarted(now: .zero).id
        #expect(s.loopStep(id, now: .zero) == .pass)
        _ = s.loopPassEnded(.failed(retryAt: .seconds(30), retryAfter: true), by: id)
        for t in stride(from: 0, to: 30, by: 1) {
            #expect(s.loopStep(id, now: .seconds(t)) == .wait(until: .seconds(30)))
        }
        #expect(s.loopStep(id, now: .seconds(30)) == .pass)
    }

    @Test("a Retry-After a flush got stays honoured by the probes of a later connection failure")
    func schedulerRetryAfterThenRefused() {
        var s = UploaderScheduler(bulkSize: 10, interval: nil)
        let id = s.loopStarted(now: .zero).id
        #expect(s.flushRequested() == .run)
        s.flushPassEnded(.failed(retryAt: .seconds(20), retryAfter: true))
        _ = s.flushEnded()
        #expect(s.loopStep(id, now: .seconds(20)) == .pass)
        _ = s.loopPassEnded(.failed(retryAt: .seconds(100), retryAfter: false, unanswered: true), by: id)
        #expect(s.flushRequested() == .run)
        s.flushPassEnded(.failed(retryAt: .seconds(200), retryAfter: true))
        _ = s.flushEnded()
        // Retry-After until 200 s; then the loop's own pass fails without an answer at 200 s.
        #expect(s.loopStep(id, now: .seconds(200)) == .pass)
        _ = s.loopPassEnded(.failed(retryAt: .seconds(500), retryAfter: false, unanswered: true), by: id)
        #expect(s.loopStep(id, now: .seconds(201)) == .probe)
        s.probeEnded(reachable: false, now: .seconds(201))
        #expect(s.loopStep(id, now: .milliseconds(201_500)) == .probe)
        s.probeEnded(reachable: true, now: .milliseconds(201_500))
        #expect(s.loopStep(id, now: .milliseconds(201_500)) == .pass, "the Retry-After (200 s) is over")
    }

    @Test("shutdown, stop or a flush during a probe: the probe's end changes nothing they decided",
          arguments: ["shutdown", "stop", "flush", "flush delivered"])
    func schedulerInterruptedProbe(by input: String) {
        var s = UploaderScheduler(bulkSize: 10, interval: nil)
        let id = s.loopStarted(now: .zero).id
        #expect(s.loopStep(id, now: .zero) == .pass)
        _ = s.loopPassEnded(.failed(retryAt: .seconds(300), retryAfter: false, unanswered: true), by: id)
        #expect(s.loopStep(id, now: .zero) == .probe)
        s.probeEnded(reachable: false, now: .zero)
        #expect(s.loopStep(id, now: .milliseconds(500)) == .probe)
        switch input {
        case "shutdown": #expect(s.shutdownRequested() == .drain)
        case "stop": #expect(s.stopRequested() == .cancel(refuseQueuedFlush: false))
        default: #expect(s.flushRequested() == .run)
        }
        let before = s.state
        s.probeEnded(reachable: true, now: .milliseconds(501))
        #expect(s.state == before)
        switch input {
        case "shutdown", "stop":
            #expect(s.loopStep(id, now: .milliseconds(501)) == .exit)
        case "flush":
            #expect(s.loopStep(id, now: .milliseconds(501)) == .wait(until: nil), "the flush runs")
            s.flushPassEnded(.failed(retryAt: .seconds(400), retryAfter: false, unanswered: true))
            _ = s.flushEnded()
            // The flush's failure starts a backoff of its own: seen down again before resuming.
            #expect(s.loopStep(id, now: .milliseconds(502)) == .probe)
            s.probeEnded(reachable: true, now: .milliseconds(502))
            #expect(s.loopStep(id, now: .milliseconds(502)) == .wait(until: .milliseconds(1002)))
        default:
            s.flushPassEnded(.completed(pending: 0))
            _ = s.flushEnded()
            #expect(s.state == .idle && s.failure?.probe.backoff == nil)
            #expect(s.loopStep(id, now: .milliseconds(502)) == .wait(until: nil))
        }
    }

    // MARK: The uploader

    /// An uploader of `events` for a collector that is away (a port bound by a socket that never
    /// listens: connections are refused, and no other test's server can take the port, as one took
    /// a stopped collector's port once and accepted the events), backing off 60 s without jitter:
    /// its loop started, its first pass failed and a probe saw the collector down. The caller
    /// keeps the returned `RefusingPort` alive for as long as the collector is to stay away.
    func uploaderForAbsentCollector(_ dir: DeliveryTempDir, events: Int) async throws -> (Uploader, RefusingPort) {
        let away = try RefusingPort()
        let log = try deliveryLog(dir, events: 0..<events)
        var config = testDelivery(away.url)
        config.backoff = .init(initial: .seconds(60), maximum: .seconds(60), jitter: false)
        let uploader = try Uploader(log: log, configuration: config, transport: SocketTransport(), diagnostics: { _ in })
        uploader.start()
        #expect(await eventually { uploader.stats.failedRequests >= 1 }, "the first pass fails: nothing listens")
        // The outage lasts until a probe has seen the collector down (a return before the first
        // probe is not seen: the backoff runs out then, ResumeProbe's rule).
        #expect(await eventually { uploader.scheduling.withLock { $0.machine.failure?.probe.backoff?.sawDown == true } })
        return (uploader, away)
    }

    /// The collector goes away before the first pass and comes back while the uploader backs off
    /// for 60 s (no jitter): without probes, nothing would be sent for a minute.
    @Test("the uploader's loop resumes within seconds of the collector's return, not when a 60 s backoff ends")
    func uploaderResumesPromptly() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let (uploader, away) = try await uploaderForAbsentCollector(dir, events: 25)
        // The collector comes back on the socket that kept the port: never free in between.
        let collector = try LoopbackCollector(boundSocket: away.takeSocket())
        defer { collector.stop() }
        let delivered = await eventually(30) { collector.acceptedEventCount == 25 }
        #expect(delivered, "delivery resumed after the collector came back (\(collector.acceptedEventCount) of 25)")
        #expect(trackIDs(collector.acceptedEvents) == Array(0..<25))
        let result = await uploader.shutdown(timeout: .seconds(5))
        #expect(result.remaining == 0)
    }

    @Test("shutdown while the loop backs off probing an absent collector: it returns, the loop ends, nothing is lost")
    func shutdownWhileProbing() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let (uploader, away) = try await uploaderForAbsentCollector(dir, events: 5)
        let result = await uploader.shutdown(timeout: .zero)
        withExtendedLifetime(away) {}  // the collector stays away until here
        #expect(result.remaining == 5, "nothing was delivered, nothing lost")
        #expect(uploader.scheduling.withLock { $0.backgroundLoop == nil && $0.probe == nil })
    }
}
