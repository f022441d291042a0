import Testing
@testable import Beacon
import BeaconTestSupport

/// The window of requests in flight (`RequestWindow`): its limit adapts as Vector's adaptive
/// request concurrency does, and a collector that mishandles pipelining gets one request at a time.
@Suite("Request window: additive increase, multiplicative decrease, the fallback to one request")
struct RequestWindowTests {
    /// Drives `window` as the uploader does with a backlog: fill the window, then answer the
    /// oldest request after `rtt`; `rounds` answers. Returns the limits seen after each answer.
    @discardableResult
    static func drive(_ window: inout RequestWindow, now: inout Duration, rounds: Int, rtt: Duration, outcome: RequestWindow.Outcome? = nil) -> [Int] {
        var limits: [Int] = []
        for _ in 0..<rounds {
            while window.canSend { #expect(window.sent() == nil) }
            // Answers of a full window arrive rtt / W apart.
            now += rtt / max(1, window.inFlight)
            #expect(window.answered(outcome ?? .accepted(rtt: rtt), now: now) == nil)
            limits.append(window.limit)
        }
        return limits
    }

    @Test("with a steady round trip and a full window, W grows by one per round trip up to the maximum, never beyond", arguments: 1...8)
    func growsToMaximum(maximum: Int) {
        var window = RequestWindow(maximum: maximum)
        var now = Duration.zero
        let limits = Self.drive(&window, now: &now, rounds: 200, rtt: .milliseconds(100))
        #expect(window.limit == maximum)
        #expect(limits.allSatisfy { (1...maximum).contains($0) })
        // Additive: never more than one step at a time.
        #expect(zip(limits, limits.dropFirst()).allSatisfy { $1 - $0 <= 1 && $1 >= $0 }, "\(limits)")
    }

    @Test("a window never full does not grow: no evidence that more would help")
    func notFullDoesNotGrow() {
        var window = RequestWindow(maximum: 8)
        var now = Duration.zero
        for _ in 0..<100 {
            // One request at a time although the window has room... only once it is 1 it is full.
            #expect(window.sent() == nil)
            now += .milliseconds(100)
            #expect(window.answered(.accepted(rtt: .milliseconds(100)), now: now) == nil)
        }
        // The limit of 1 was full each time: it grew to 2, and never beyond, as one request never fills 2.
        #expect(window.limit == 2)
    }

    @Test("back pressure (429, 503, a timeout) shrinks W to ⌊0.9 W⌋ once per round trip, down to one, never zero", arguments: 1...8)
    func pushedBackShrinks(maximum: Int) {
        var window = RequestWindow(maximum: maximum)
        var now = Duration.zero
        Self.drive(&window, now: &now, rounds: 200, rtt: .milliseconds(100))
        var expected = maximum
        var seen: [Int] = []
        for _ in 0..<400 {
            while window.canSend { #expect(window.sent() == nil) }
            now += .milliseconds(100) / max(1, window.inFlight)
            let before = window.limit
            #expect(window.answered(.pushedBack, now: now) == nil)
            if window.limit != before {
                expected = max(1, Int(Double(before) * 0.9))
                #expect(window.limit == expected)
            }
            seen.append(window.limit)
        }
        #expect(window.limit == 1)
        #expect(seen.allSatisfy { $0 >= 1 })
    }

    @Test("a round trip rising beyond the long average by more than 2.5 deviations shrinks W; one back at the average lets it grow again")
    func risingLatencyShrinks() {
        var window = RequestWindow(maximum: 8)
        var now = Duration.zero
        Self.drive(&window, now: &now, rounds: 200, rtt: .milliseconds(100))
        #expect(window.limit == 8)
        Self.drive(&window, now: &now, rounds: 20, rtt: .milliseconds(400))
        #expect(window.limit < 8)
        let shrunk = window.limit
        Self.drive(&window, now: &now, rounds: 400, rtt: .milliseconds(100))
        #expect(window.limit > shrunk)
    }

    @Test("a collector that mishandles pipelining gets one request at a time from then on, whatever it answers later")
    func fallbackToOne() {
        for maximum in 1...8 {
            var window = RequestWindow(maximum: maximum)
            var now = Duration.zero
            Self.drive(&window, now: &now, rounds: 100, rtt: .milliseconds(50))
            #expect(window.forget(window.inFlight) == nil)
            window.pipeliningFailed("closed with 3 requests unanswered")
            #expect(window.effectiveLimit == 1 && window.pipeliningRefused == "closed with 3 requests unanswered")
            window.pipeliningFailed("another reason")
            #expect(window.pipeliningRefused == "closed with 3 requests unanswered", "the first reason is kept")
            for _ in 0..<200 {
                #expect(window.canSend)
                #expect(window.sent() == nil)
                #expect(!window.canSend)
                now += .milliseconds(50)
                #expect(window.answered(.accepted(rtt: .milliseconds(50)), now: now) == nil)
            }
            #expect(window.effectiveLimit == 1)
        }
    }

    @Test("a connection ending early (with requests unanswered, before twice the window was answered) three times in a row falls back to one request; once is a collector going down; a connection that served twice the window starts the count again")
    func earlyEnds() {
        for maximum in 2...8 {
            var window = RequestWindow(maximum: maximum)
            var now = Duration.zero
            Self.drive(&window, now: &now, rounds: 100, rtt: .milliseconds(10))
            let limit = window.limit
            for answered in 0..<(2 * limit) {
                var w = window
                let first = w.connectionEnded(after: answered, "early")
                let second = w.connectionEnded(after: answered, "early")
                #expect(!first && !second)
                #expect(w.pipeliningRefused == nil && w.effectiveLimit == limit)
                let third = w.connectionEnded(after: answered, "early third")
                #expect(third)
                #expect(w.pipeliningRefused == "early third" && w.effectiveLimit == 1)
                let again = w.connectionEnded(after: answered, "again")
                #expect(!again, "said once")
            }
            // Late ends (a keep-alive limit above twice the window) never count.
            var late = window
            for _ in 0..<10 {
                let ended = late.connectionEnded(after: 2 * limit, "late")
                #expect(!ended)
            }
            #expect(late.pipeliningRefused == nil)
            // Two early ends, a connection that served, two more: no fallback.
            var mixed = window
            _ = mixed.connectionEnded(after: 1, "early")
            _ = mixed.connectionEnded(after: 1, "early")
            mixed.connectionServed()
            _ = mixed.connectionEnded(after: 1, "early")
            let fourth = mixed.connectionEnded(after: 1, "early")
            #expect(!fourth)
            #expect(mixed.pipeliningRefused == nil)
        }
    }

    /// Every input in every state a small window reaches (limit 1...maximum, every number in
    /// flight up to it, pipelining working or not): the invariants hold after each.
    @Test("every state × input: the limit stays in 1…maximum, moves by +1 or to ⌊0.9 W⌋, in flight never above the effective limit", arguments: 1...6)
    func everyStateAndInput(maximum: Int) {
        enum Input: CaseIterable { case send, fast, slow, pushedBack, other, forget, forgetTooMany, refuse }
        // The states: grown to each limit, with each number in flight, pipelining refused or not.
        var states: [(RequestWindow, Duration)] = []
        for target in 1...maximum {
            var window = RequestWindow(maximum: maximum)
            var now = Duration.zero
            while window.limit < target { Self.drive(&window, now: &now, rounds: 1, rtt: .milliseconds(10)) }
            #expect(window.forget(window.inFlight) == nil)
            for inFlight in 0...window.limit {
                var state = window
                for _ in 0..<inFlight { #expect(state.sent() == nil) }
                states.append((state, now))
                var refused = state
                refused.pipeliningFailed("test")
                states.append((refused, now))
            }
        }
        for (state, now) in states {
            for input in Input.allCases {
                var window = state
                let before = window
                switch input {
                case .send where !window.canSend:
                    // Impossible: the uploader writes only while canSend. It fails loudly and changes nothing.
                    let (result, recorded) = LifecycleStateMachineTests.recordingInvalidTransitions { window.sent() }
                    #expect(result != nil && recorded == [result!] && result?.machine == "RequestWindow")
                    #expect(window == before)
                case .send:
                    #expect(window.sent() == nil)
                    #expect(window.inFlight == before.inFlight + 1)
                case .fast, .slow, .pushedBack, .other:
                    guard window.inFlight > 0 else {
                        // Impossible: an answer with nothing in flight.
                        let (result, recorded) = LifecycleStateMachineTests.recordingInvalidTransitions { window.answered(.other, now: now + .seconds(60)) }
                        #expect(result != nil && recorded == [result!])
                        #expect(window == before)
                        break
                    }
                    let outcome: RequestWindow.Outcome = switch input {
                    case .fast: .accepted(rtt: .milliseconds(5))
                    case .slow: .accepted(rtt: .seconds(5))
                    case .pushedBack: .pushedBack
                    default: .other
                    }
                    // Late enough for the interval to end.
                    #expect(window.answered(outcome, now: now + .seconds(60)) == nil)
                    #expect(window.inFlight == before.inFlight - 1)
                    if window.limit > before.limit {
                        #expect(window.limit == before.limit + 1)
                        #expect(input == .fast, "only a quick acceptance grows the window")
                    }
                    if window.limit < before.limit {
                        #expect(window.limit == max(1, Int(Double(before.limit) * 0.9)))
                        #expect(input == .pushedBack || input == .slow)
                    }
                case .forget:
                    #expect(window.forget(window.inFlight) == nil)
                    #expect(window.inFlight == 0 && window.limit == before.limit)
                case .forgetTooMany:
                    // Impossible: more forgotten than were in flight.
                    let (result, recorded) = LifecycleStateMachineTests.recordingInvalidTransitions { window.forget(window.inFlight + 1) }
                    #expect(result != nil && recorded == [result!])
                    #expect(window == before)
                case .refuse:
                    window.pipeliningFailed("test")
                    #expect(window.effectiveLimit == 1)
                }
                #expect((1...maximum).contains(window.limit))
                #expect(window.inFlight >= 0)
                #expect(window.canSend == (window.inFlight < window.effectiveLimit))
                if before.pipeliningRefused != nil { #expect(window.effectiveLimit == 1) }
            }
        }
    }
}
