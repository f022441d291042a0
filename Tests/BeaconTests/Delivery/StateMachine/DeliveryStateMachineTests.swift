import Foundation
import Testing
@testable import Beacon

/// The delivery state machine over every small case, fed with answers: no sockets, no sleeping.
@Suite("Delivery: the state machine over every small case")
struct DeliveryStateMachineTests {
    typealias Machine = DeliveryStateMachine

    /// README's answers table, row by row, as data: the first row that names a status decides.
    /// Statuses no row names (1xx, 3xx) are read as a configuration problem, like "other 4xx".
    static let answersTable: [(statuses: [ClosedRange<Int>], action: AnswerAction)] = [
        ([200...299], .acknowledge),                         // 2xx
        ([501...501, 505...505], .pause),                    // "5xx except 501/505"
        ([408...408, 429...429, 500...599], .retry),         // 408, 429, 5xx
        ([413...413], .split),                               // 413
        ([400...400, 422...422], .reject),                   // 400, 422
        ([100...199, 300...399, 400...499], .pause),         // 401, 403, 404, other 4xx (and 1xx, 3xx)
    ]

    @Test("every status 100–599 gets the action README's answers table gives it", arguments: 100...599)
    func statusTable(status: Int) throws {
        let row = try #require(Self.answersTable.first { $0.statuses.contains { $0.contains(status) } })
        #expect(AnswerAction(status: status) == row.action)
    }

    /// What a run of the machine did.
    struct Run {
        var sends: [(range: Range<Int>, retry: Int)] = []
        /// Events in the order the collector accepted them.
        var delivered: [Int] = []
        var setAside: [Machine.SetAside] = []
        var commits: [Int] = []
        var stops: [Machine.Stop] = []
        var sendsPerPass: [Int] = [0]
        var finished = false
    }

    /// Drives `machine` against a collector model until it finishes or `passes` passes ended.
    static func drive(_ machine: inout Machine, passes: Int = 50, answer: (Range<Int>, _ pass: Int) -> (AnswerAction, Machine.Answer)) -> Run {
        var run = Run()
        var committed = 0
        while run.sends.count < 10_000 {
            switch machine.nextAction() {
            case .send(let range, let retry):
                run.sends.append((range, retry))
                run.sendsPerPass[run.sendsPerPass.count - 1] += 1
                let (verdict, reply) = answer(range, run.stops.count)
                if verdict == .acknowledge { run.delivered += Array(range) }
                machine.received(verdict, reply)
            case .commit(let through, let setAside):
                #expect(through > committed, "commits move forward")
                #expect(setAside.allSatisfy { $0.index >= committed && $0.index < through })
                committed = through
                run.commits.append(through)
                run.setAside += setAside
            case .finished:
                #expect(committed == machine.count)
                run.finished = true
                return run
            case .stop(let stop):
                run.stops.append(stop)
                if run.stops.count >= passes { return run }
                run.sendsPerPass.append(0)
            }
        }
        Issue.record("the machine did not settle in 10,000 requests")
        return run
    }

    static func ceilLog2(_ n: Int) -> Int { n <= 1 ? 0 : Int.bitWidth - (n - 1).leadingZeroBitCount }

    static let poison = Machine.Answer(status: 500, detail: "Code: 27. Cannot parse input: expected UInt64")

    // MARK: 400 / 422 / 413

    @Test("400 at every position of batches of 2…8: the one event set aside once another request proved the collector up, the rest delivered in order, in one pass", arguments: 2...8)
    func rejectEveryPosition(count: Int) {
        for p in 0..<count {
            var machine = Machine(count: count, isolateAfter: 3)
            let run = Self.drive(&machine) { range, _ in range.contains(p) ? (.reject, .init(status: 400, detail: "bad row")) : (.acknowledge, .init(status: 200)) }
            #expect(run.finished && run.stops.isEmpty, "n \(count) p \(p)")
            #expect(run.delivered == Array(0..<count).filter { $0 != p })
            #expect(run.setAside == [.init(index: p, reason: .refused, answer: .init(status: 400, detail: "bad row"))])
            #expect(run.sends.count <= 2 * Self.ceilLog2(count) + 1, "bisection: two requests per level")
        }
    }

    @Test("400 for two events anywhere in batches of 2…8: both set aside, the rest in order", arguments: 2...8)
    func rejectEveryPair(count: Int) {
        for a in 0..<count {
            for b in (a + 1)..<count {
                var machine = Machine(count: count, isolateAfter: 3)
                let run = Self.drive(&machine, passes: 3) { range, _ in range.contains(a) || range.contains(b) ? (.reject, .init(status: 422)) : (.acknowledge, .init(status: 200)) }
                if count == 2 {
                    // Every event refused: nothing proves the collector accepts this client's data.
                    #expect(run.stops == Array(repeating: .refusedEverything(.init(status: 422)), count: 3) && run.setAside.isEmpty && run.commits.isEmpty)
                    continue
                }
                #expect(run.finished && run.stops.isEmpty)
                #expect(run.delivered == Array(0..<count).filter { $0 != a && $0 != b })
                #expect(run.setAside.map(\.index) == [a, b])
            }
        }
    }

    /// Issue 26 (4): nginx with `ssl_verify_client on` answers every request "400 No required SSL
    /// certificate was sent"; the bisection set all 20 events aside and checkpointed past them.
    @Test("a 400 to every request, down to single events, in batches of 1…20: nothing set aside, nothing committed, the pass pauses (refusedEverything) within its failure budget, pass after pass", arguments: 1...20)
    func refusedEverything(count: Int) {
        let refusal = Machine.Answer(status: 400, detail: "400 No required SSL certificate was sent")
        for verdict in [AnswerAction.reject] {
            var machine = Machine(count: count, isolateAfter: 3)
            let run = Self.drive(&machine, passes: 6) { _, _ in (verdict, refusal) }
            #expect(!run.finished && run.setAside.isEmpty && run.commits.isEmpty && run.delivered.isEmpty, "n \(count): \(run.setAside)")
            #expect(run.stops == Array(repeating: .refusedEverything(refusal), count: 6), "n \(count): \(run.stops)")
            let budget = 2 * Self.ceilLog2(count) + 2
            #expect(run.sendsPerPass.dropLast().allSatisfy { $0 <= budget + 1 && $0 >= 1 }, "n \(count): \(run.sendsPerPass), budget \(budget)")
            // The collector takes the certificate: everything is delivered, in order, nothing set aside.
            let up = Self.drive(&machine) { _, _ in (.acknowledge, .init(status: 200)) }
            #expect(up.finished && up.setAside.isEmpty && up.delivered.sorted() == Array(0..<count) && up.delivered == up.delivered.sorted())
        }
    }

    @Test("400 for one event while the first request of the pass is refused too: set aside only after a 2xx, at every position of 2…8; a batch of one refused event pauses")
    func refusalNeedsProofInThePass() {
        var single = Machine(count: 1, isolateAfter: 3)
        let alone = Self.drive(&single, passes: 2) { _, _ in (.reject, .init(status: 400, detail: "bad row")) }
        #expect(alone.stops == Array(repeating: .refusedEverything(.init(status: 400, detail: "bad row")), count: 2) && alone.setAside.isEmpty)
        #expect(single.awaitsProof, "the uploader reads a longer batch when more events are pending")
        for count in 2...8 {
            for p in 0..<count {
                var machine = Machine(count: count, isolateAfter: 3)
                var sawProof = false
                let run = Self.drive(&machine) { range, _ in
                    if range.contains(p) { return (.reject, .init(status: 400)) }
                    sawProof = true
                    return (.acknowledge, .init(status: 200))
                }
                #expect(sawProof && run.finished && run.setAside.map(\.index) == [p], "n \(count) p \(p)")
            }
        }
    }

    @Test("413 splits until requests fit, at every split point; a single event too large is set aside", arguments: 1...8)
    func splitEveryFit(count: Int) {
        for fit in 1...8 {
            for huge in [nil] + Array(0..<count) as [Int?] {
                var machine = Machine(count: count, isolateAfter: 3)
                let run = Self.drive(&machine) { range, _ in
                    range.count > fit || huge.map(range.contains) == true ? (.split, .init(status: 413)) : (.acknowledge, .init(status: 200))
                }
                #expect(run.finished && run.stops.isEmpty)
                #expect(run.delivered == Array(0..<count).filter { $0 != huge })
                #expect(run.setAside.map(\.index) == (huge.map { [$0] } ?? []))
                #expect(run.setAside.allSatisfy { $0.reason == .tooLarge })
                #expect(run.sends.filter { $0.range.count > fit }.count <= 1 + count, "only halves of too-large requests are tried")
            }
        }
    }

    // MARK: Retryable answers: isolation and outages

    @Test("a 500 for any request holding one event, at every position of batches of 2…8 and K 1…3: after K failed passes only that event is set aside, with the answer; the rest is delivered in order", arguments: 2...8)
    func poisonEveryPosition(count: Int) {
        for k in 1...3 {
            for p in 0..<count {
                var machine = Machine(count: count, isolateAfter: k)
                let run = Self.drive(&machine) { range, _ in range.contains(p) ? (.retry, Self.poison) : (.acknowledge, .init(status: 200)) }
                #expect(run.finished, "n \(count) p \(p) K \(k)")
                #expect(run.stops == Array(repeating: .retry(Self.poison), count: k), "K passes fail before the isolation")
                #expect(run.sends.prefix(k).allSatisfy { $0.range == 0..<count }, "the whole batch K times")
                #expect(run.sends.prefix(k).map(\.retry) == Array(0..<k), "X-Beacon-Retry counts the attempts")
                #expect(run.delivered == Array(0..<count).filter { $0 != p }, "n \(count) p \(p) K \(k): in order")
                #expect(run.setAside == [.init(index: p, reason: .keepsFailing, answer: Self.poison)])
                #expect(run.sends.filter { $0.range == p..<(p + 1) }.count == k, "the event alone failed K times")
            }
        }
    }

    @Test("a batch of one event that keeps failing cannot be told from an outage: never set aside")
    func singleEventNeverSetAside() {
        var machine = Machine(count: 1, isolateAfter: 3)
        let run = Self.drive(&machine, passes: 20) { _, _ in (.retry, Self.poison) }
        #expect(!run.finished && run.setAside.isEmpty && run.commits.isEmpty)
        #expect(run.sendsPerPass.allSatisfy { $0 == 1 })
    }

    @Test("two events that keep failing, at every pair of positions: only they are ever set aside; every other event is delivered, in order", arguments: 2...8)
    func twoPoisonsEveryPair(count: Int) {
        for a in 0..<count {
            for b in (a + 1)..<count {
                var machine = Machine(count: count, isolateAfter: 2)
                let run = Self.drive(&machine, passes: 30) { range, _ in range.contains(a) || range.contains(b) ? (.retry, Self.poison) : (.acknowledge, .init(status: 200)) }
                #expect(run.delivered == Array(0..<count).filter { $0 != a && $0 != b }, "n \(count) poisons \(a), \(b)")
                #expect(Set(run.setAside.map(\.index)).isSubset(of: [a, b]))
                if !run.finished {
                    // Left over only when nothing after the last poison can prove the collector up;
                    // the good events after it are delivered, awaiting the commit.
                    #expect(machine.segments.allSatisfy { $0.state == .delivered || $0.range.allSatisfy { $0 == a || $0 == b } }, "n \(count) poisons \(a), \(b): \(machine.segments)")
                }
            }
        }
    }

    @Test("an outage (every answer 500 or a timeout) for 40 passes sets nothing aside and costs few requests per pass; then everything is delivered in order", arguments: 1...8)
    func outageThenUp(count: Int) {
        for k in [1, 3] {
            var machine = Machine(count: count, isolateAfter: k)
            let timeout = Machine.Answer(status: nil, detail: "no answer within 30 s")
            let down = Self.drive(&machine, passes: 40) { _, pass in (.retry, pass % 2 == 0 ? Self.poison : timeout) }
            #expect(!down.finished && down.setAside.isEmpty && down.commits.isEmpty && down.delivered.isEmpty)
            // K passes of one request; then each pass stops after its failure budget (which grows
            // by 2⌈log₂ n⌉ + 2 a pass), and never sends more than the bisection tree has nodes.
            for (pass, sends) in down.sendsPerPass.enumerated() {
                let bound = pass < k ? 1 : min(2 * count - 1, (2 * Self.ceilLog2(count) + 2) * (pass - k + 1) + 1)
                #expect(sends <= bound, "n \(count) K \(k) pass \(pass): \(sends) requests, bound \(bound)")
            }
            let up = Self.drive(&machine) { _, _ in (.acknowledge, .init(status: 200)) }
            #expect(up.finished && up.setAside.isEmpty && up.stops.isEmpty)
            #expect(up.delivered == Array(0..<count))
        }
    }

    /// Issue 26 (3): failed passes recorded in `delivery.inflight` (connection refused) carried
    /// over to single-event attempts: "failed 3 times alone while other events were delivered"
    /// though the collector saw the event alone once.
    @Test("failures without an answer, failures of passes that never proved the collector up and failures recorded by an earlier run never set an event aside: for batches of 2…8, every position, K 2…4 and 0…6 outage passes, an event answered 503 once when the collector is back is delivered", arguments: 2...8)
    func staleFailuresNeverSetAside(count: Int) {
        let refused = Machine.Answer(status: nil, detail: "connect failed: Connection refused")
        let unavailable = Machine.Answer(status: 503, detail: "chaos says 503")
        // K ≥ 2: with K = 1 one 503 for the event alone, once the collector is proven up, is
        // enough to set it aside, as configured.
        for k in 2...4 {
            for outage in 0...6 {
                for earlier in [0, k, k + 3] {
                    for p in 0..<count {
                        var machine = Machine(count: count, earlierSends: earlier, earlierFailures: earlier, isolateAfter: k)
                        // The outage: no answer, or 503 to everything (a proxy in front of a dead collector).
                        let down = Self.drive(&machine, passes: outage) { _, pass in (.retry, pass % 2 == 0 ? refused : unavailable) }
                        #expect(down.setAside.isEmpty && down.delivered.isEmpty)
                        // Back: event p gets one 503 (the first request holding it), then 200 like the rest.
                        var failedOnce = false
                        let up = Self.drive(&machine) { range, _ in
                            if range.contains(p) && !failedOnce {
                                failedOnce = true
                                return (.retry, unavailable)
                            }
                            return (.acknowledge, .init(status: 200))
                        }
                        #expect(up.setAside.isEmpty, "n \(count) K \(k) outage \(outage) earlier \(earlier) p \(p): \(up.setAside)")
                        #expect(up.finished && up.delivered.sorted() == Array(0..<count), "n \(count) K \(k) outage \(outage) earlier \(earlier) p \(p)")
                    }
                }
            }
        }
    }

    @Test("a proof does not outlive the collector: after a 2xx, a port that refuses connections sets nothing aside, however long, at every position of 2…8 and K 2…4", arguments: 2...8)
    func refusedConnectionsEndTheProof(count: Int) {
        let refused = Machine.Answer(status: nil, detail: "connect failed: Connection refused")
        for k in 2...4 {  // K = 1: the one 500 alone under proof sets it aside, as configured
            for p in 0..<count {
                var machine = Machine(count: count, isolateAfter: k)
                // K passes of 500 for the batch holding p (isolation begins), a 2xx for a request
                // without p, one 500 for p alone; then the port is closed for 20 passes.
                var up = true
                let run = Self.drive(&machine, passes: k + 20) { range, _ in
                    guard up else { return (.retry, refused) }
                    if range == p..<(p + 1) { up = false; return (.retry, Self.poison) }
                    return range.contains(p) ? (.retry, Self.poison) : (.acknowledge, .init(status: 200))
                }
                #expect(run.setAside.isEmpty, "n \(count) K \(k) p \(p): \(run.setAside)")
            }
        }
    }

    @Test("failures without an answer (a cut body, a reset, a timeout) never start an isolation: however many, beside fewer than K answered ones, first arrivals stay in log order", arguments: 2...8)
    func unansweredFailuresDoNotIsolate(count: Int) {
        let cut = Machine.Answer(status: nil, detail: "the connection closed before the whole answer")
        for k in 1...4 {
            for unanswered in [k, k + 3, 3 * k + 5] {
                for answered in 0..<k {  // answered failures (503) mixed in, fewer than K
                    var machine = Machine(count: count, isolateAfter: k)
                    var failures = 0
                    // Every request that starts at the front fails until the failures run out
                    // (the answered ones first, one pass each), then everything is accepted.
                    let run = Self.drive(&machine, passes: 200) { range, _ in
                        guard failures < unanswered + answered else { return (.acknowledge, .init(status: 200)) }
                        failures += 1
                        return failures <= answered ? (.retry, .init(status: 503)) : (.retry, cut)
                    }
                    #expect(run.finished && run.setAside.isEmpty, "n \(count) K \(k): \(run.setAside)")
                    var seen = Set<Int>()
                    let firsts = run.delivered.filter { seen.insert($0).inserted }
                    #expect(firsts == Array(0..<count), "n \(count) K \(k), \(answered) answered and \(unanswered) unanswered failures: first arrivals \(firsts)")
                    #expect(run.sends.allSatisfy { $0.range.lowerBound == 0 }, "n \(count) K \(k): no probe past the front, \(run.sends.map(\.range))")
                }
            }
        }
    }

    @Test("an outage that starts in the middle of an isolation sets at most one event aside: each set-aside uses up the proof", arguments: 2...8)
    func outageDuringIsolation(count: Int) {
        for k in 1...3 {
            var machine = Machine(count: count, isolateAfter: k)
            var answers = 0
            // K passes fail (isolation begins); the next request succeeds; then every one fails.
            let run = Self.drive(&machine, passes: 20) { _, _ in
                answers += 1
                return answers == k + 1 ? (.acknowledge, .init(status: 200)) : (.retry, Self.poison)
            }
            #expect(run.setAside.count <= 1, "n \(count) K \(k): \(run.setAside)")
            #expect(run.finished || run.stops.count == 20)
        }
    }

    // MARK: Pause, restarts, retry counts

    @Test("a configuration problem stops the pass, keeps everything, and the same request goes again with X-Beacon-Retry 1")
    func pauseKeepsEverything() {
        var machine = Machine(count: 5, isolateAfter: 1)
        let run = Self.drive(&machine) { _, pass in pass == 0 ? (.pause, .init(status: 401)) : (.acknowledge, .init(status: 200)) }
        #expect(run.stops == [.pause(.init(status: 401))])
        #expect(run.sends.map(\.range) == [0..<5, 0..<5] && run.sends.map(\.retry) == [0, 1])
        #expect(run.finished && run.setAside.isEmpty && run.delivered == Array(0..<5))
    }

    @Test("sends whose answer was never seen (a killed process) are counted in X-Beacon-Retry but never start an isolation", arguments: 0...6)
    func restartAfterUnansweredSends(sends: Int) {
        var machine = Machine(count: 6, earlierSends: sends, isolateAfter: 3)
        #expect(!machine.isolating)
        #expect(machine.nextAction() == .send(0..<6, retry: sends), "the same batch, whole, with the same key")
        #expect(machine.resumePoint == (6, sends + 1) && machine.resumeFailures == 0)
    }

    @Test("earlier failed passes from delivery.inflight: below K the whole batch goes with X-Beacon-Retry = sends; at K the isolation resumes", arguments: 0...4)
    func restartWithEarlierSends(sends: Int) {
        var machine = Machine(count: 6, earlierSends: sends, earlierFailures: sends, isolateAfter: 3)
        guard case .send(let range, let retry) = machine.nextAction() else { Issue.record("expected a send"); return }
        if sends < 3 {
            #expect(range == 0..<6 && retry == sends)
            #expect(machine.resumePoint == (6, sends + 1))
        } else {
            #expect(range == 0..<3 && retry == 0)
            #expect(machine.resumePoint == (6, sends), "a restart resumes the isolation")
        }
    }

    @Test("the resume point is the request in flight from the committed position")
    func resumePointFollowsTheFront() {
        var machine = Machine(count: 8, isolateAfter: 3)
        #expect(machine.nextAction() == .send(0..<8, retry: 0))
        machine.received(.reject, .init(status: 400))
        #expect(machine.nextAction() == .send(0..<4, retry: 0))
        #expect(machine.resumePoint == (4, 1))
        machine.received(.acknowledge)
        #expect(machine.nextAction() == .commit(through: 4, setAside: []))
        #expect(machine.nextAction() == .send(4..<8, retry: 0))
        #expect(machine.resumePoint == (4, 1))
        machine.received(.retry, Self.poison)
        #expect(machine.nextAction() == .stop(.retry(Self.poison)))
        #expect(machine.nextAction() == .send(4..<8, retry: 1))
        #expect(machine.resumePoint == (4, 2))
    }

    @Test("a request abandoned before it was sent is not counted; one cancelled in flight is")
    func abandon() {
        var machine = Machine(count: 3, isolateAfter: 3)
        #expect(machine.nextAction() == .send(0..<3, retry: 0))
        machine.abandon(sent: false)
        #expect(machine.nextAction() == .send(0..<3, retry: 0))
        machine.abandon(sent: true)
        #expect(machine.nextAction() == .send(0..<3, retry: 1))
    }

    // MARK: Timing

    @Test("a request starts only if the time left exceeds the last request's duration; its timeout never passes the deadline")
    func requestTimeoutRule() {
        let t = Duration.seconds(30)
        #expect(DeliveryTiming.requestTimeout(now: .seconds(5), deadline: nil, requestTimeout: t, lastRequestDuration: .seconds(2)) == t)
        #expect(DeliveryTiming.requestTimeout(now: .seconds(5), deadline: .seconds(100), requestTimeout: t, lastRequestDuration: .seconds(2)) == t)
        #expect(DeliveryTiming.requestTimeout(now: .seconds(5), deadline: .seconds(15), requestTimeout: t, lastRequestDuration: .seconds(2)) == .seconds(10))
        #expect(DeliveryTiming.requestTimeout(now: .seconds(5), deadline: .seconds(7), requestTimeout: t, lastRequestDuration: .seconds(2)) == nil)
        #expect(DeliveryTiming.requestTimeout(now: .seconds(5), deadline: .seconds(5), requestTimeout: t, lastRequestDuration: .zero) == nil)
        #expect(DeliveryTiming.requestTimeout(now: .seconds(5), deadline: .milliseconds(5001), requestTimeout: t, lastRequestDuration: .zero) == nil, "at least 1 ms")
        for now in stride(from: 0, through: 20, by: 1) {
            let timeout = DeliveryTiming.requestTimeout(now: .seconds(now), deadline: .seconds(12), requestTimeout: t, lastRequestDuration: .milliseconds(500))
            if let timeout { #expect(.seconds(now) + timeout <= .seconds(12)) } else { #expect(now >= 12) }
        }
    }

    @Test("a flush retries after the backoff only while a request may still start; without a deadline it makes one pass")
    func flushRetryRule() {
        let t = Duration.seconds(30)
        #expect(DeliveryTiming.flushRetry(at: .seconds(2), deadline: nil, requestTimeout: t, lastRequestDuration: .zero) == nil)
        #expect(DeliveryTiming.flushRetry(at: .seconds(2), deadline: .seconds(60), requestTimeout: t, lastRequestDuration: .zero) == .seconds(2))
        #expect(DeliveryTiming.flushRetry(at: .seconds(59), deadline: .seconds(60), requestTimeout: t, lastRequestDuration: .seconds(1)) == nil)
        #expect(DeliveryTiming.flushRetry(at: .seconds(61), deadline: .seconds(60), requestTimeout: t, lastRequestDuration: .zero) == nil)
        let backoff = DeliveryConfiguration.Backoff(initial: .seconds(1), maximum: .seconds(8), jitter: false)
        #expect((1...6).map { DeliveryTiming.wait(afterFailedPasses: $0, retryAfter: nil, backoff: backoff) } == [1, 2, 4, 8, 8, 8].map { Duration.seconds($0) })
        #expect(DeliveryTiming.wait(afterFailedPasses: 3, retryAfter: .seconds(30), backoff: backoff) == .seconds(30), "Retry-After replaces the backoff")
        #expect(DeliveryTiming.wait(afterFailedPasses: 1, retryAfter: .seconds(1_000_000), backoff: backoff) == .seconds(86_400))
    }
}
