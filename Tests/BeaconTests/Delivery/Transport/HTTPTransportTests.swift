import Dispatch
import Foundation
import Synchronization
import Testing
@testable import Beacon
@testable import BeaconURLSession
import BeaconTesting
import BeaconTestSupport

/// `HTTPTransport` holds memory for the requests in flight only: nothing of a request (its body,
/// its per-request state) outlives its answer, whether it was answered, timed out or cancelled.
@Suite("HTTPTransport: memory and deadlines", .timeLimit(.minutes(1)))
struct HTTPTransportTests {
    enum Ending: String, CaseIterable, CustomStringConvertible {
        case answered, timedOut, cancelled
        var description: String { rawValue }
    }

    @Test("nothing of a request stays in memory after it ends", arguments: Ending.allCases)
    func requestsLeaveNothingBehind(ending: Ending) async throws {
        let collector = try LoopbackCollector()
        defer { collector.stop() }
        collector.retainsBodies = false
        if ending != .answered { collector.defaultReply = .never }
        let transport = HTTPTransport()
        let body = [UInt8](repeating: UInt8(ascii: "x"), count: 64 * 1024)
        for i in 0..<8 {
            // A long request timeout: what a 30 s deadline timer would keep, it keeps for longer.
            let request = TransportRequest(url: collector.url, body: body, timeout: ending == .timedOut ? .milliseconds(50) : .seconds(120))
            switch ending {
            case .answered:
                let response = try await transport.send(request)
                #expect(response.status == 200)
            case .timedOut:
                await #expect(throws: TransportError.self) { _ = try await transport.send(request) }
            case .cancelled:
                let task = Task { try await transport.send(request) }
                await collector.waitForRequests(count: i + 1)
                task.cancel()
                let outcome = await task.result
                guard case .failure(let error as TransportError) = outcome, error.code == .cancelled else {
                    Issue.record("request \(i): expected a cancellation, got \(outcome)")
                    return
                }
            }
        }
        // URLSession lets go of a finished task on its own queue: give it a moment, not 30 s.
        let released = await eventually(30) { transport.live.current == (0, 0) }
        #expect(released, "still in memory after every request ended (\(ending)): \(transport.live.current)")
    }

    @Test("a sub-second deadline fires on time and its entry is removed")
    func deadlineFiresAndIsRemoved() async throws {
        let collector = try LoopbackCollector()
        defer { collector.stop() }
        collector.defaultReply = .never
        let transport = HTTPTransport()
        let clock = ContinuousClock()
        let began = clock.now
        do {
            _ = try await transport.send(TransportRequest(url: collector.url, body: [], timeout: .milliseconds(300)))
            Issue.record("a collector that never answers got an answer")
        } catch let error as TransportError {
            #expect(error.code == .timeout, "\(error)")
        }
        let elapsed = began.duration(to: clock.now)
        #expect(elapsed >= .milliseconds(300), "\(elapsed): the deadline fired early")
        #expect(await eventually(30) { transport.live.current == (0, 0) })
    }

    @Test("the deadline timer runs every action at its deadline, earliest first, and forgets removed ones")
    func deadlineTimerOrder() async throws {
        let timer = DeadlineTimer(name: "beacon-ttest")
        let fired = Mutex<[Int]>([])
        // Half a second ahead: on a loaded machine adding the entries can take longer than their
        // spacing, and an entry already due when added fires before the earlier ones exist.
        let start = DispatchTime.now() + .milliseconds(500)
        // Added out of order, so that the timer must re-arm for an earlier deadline.
        var entries: [Int: DeadlineTimer.Entry] = [:]
        for (i, ms) in [(3, 90), (1, 30), (2, 60), (4, 120), (0, 10)] {
            entries[i] = timer.add(at: start + .milliseconds(ms)) { fired.withLock { $0.append(i) } }
        }
        timer.remove(entries[2]!)
        // Checked when the adds and the removal ended before the first deadline (nearly always);
        // a machine stalled past it may have run some before the others existed.
        let pending = timer.pendingCount
        let inTime = DispatchTime.now() < start
        if inTime { #expect(pending == 4) }
        let done = await eventually(30) { Set(fired.withLock { $0 }).isSuperset(of: [0, 1, 3, 4]) }
        #expect(done)
        if inTime {
            #expect(fired.withLock { $0 } == [0, 1, 3, 4])
        } else {
            print("deadlineTimerOrder: the entries were added after the first deadline (a stalled machine); their order is not checked")
        }
        #expect(timer.pendingCount == 0)
    }
}
