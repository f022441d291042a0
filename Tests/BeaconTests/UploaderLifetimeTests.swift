import Testing
@testable import Beacon
import BeaconLog
import BeaconTesting

/// A started uploader leaves nothing behind once it ends: its delivery loop returns, nothing sleeps
/// on its clock, and the uploader is freed (a task that kept it would be a leak LeakSanitizer
/// reports, .ci/run).
@Suite("Delivery: an ended uploader leaves no task behind", .timeLimit(.minutes(1)))
struct UploaderLifetimeTests {
    enum Ending: CaseIterable, Sendable { case stop, shutdown, runCancelled, dropped }

    @Test("backing off on a manual clock after a failure, then stopped, shut down, its run() cancelled or (started) dropped: the loop ends, nothing sleeps on the clock, the uploader is freed", arguments: Ending.allCases)
    func anEndedUploaderIsFreed(ending: Ending) async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<5)
        let transport = InMemoryTransport()
        transport.defaultReply = .status(503)
        let clock = ManualClock()
        weak var weakUploader: Uploader?
        do {
            let uploader = try Uploader(log: log, configuration: testDelivery(), transport: transport, clock: clock)
            weakUploader = uploader
            var runner: Task<Void, Never>?
            if ending == .runCancelled { runner = Task { await uploader.run(shutdownGrace: .zero) } } else { uploader.start() }
            await transport.waitForRequests(count: 1)
            await clock.waitForSleepers(count: 1)  // the backoff after the 503
            switch ending {
            case .stop: uploader.stop()
            case .shutdown: _ = await uploader.shutdown(timeout: .zero)
            case .runCancelled:
                runner?.cancel()
                await runner?.value
            case .dropped:
                break  // started, never stopped: the last reference goes at the end of this scope
            }
        }
        #expect(await eventually { weakUploader == nil }, "a task still holds the uploader after \(ending)")
        #expect(await eventually { clock.sleeperCount == 0 }, "a sleep is left on the clock after \(ending): the loop did not end")
        #expect(transport.requests.count == 1, "no request after \(ending)")
    }

    /// `run()` means what ``Beacon/run()`` means: cancelled, it shuts down gracefully (what is
    /// pending goes out within the grace) and returns; it used to stop the loop and leave the
    /// events pending, and the uploader open.
    @Test("run() cancelled shuts the uploader down: the pending events go out within the grace, then later flushes are refused")
    func runCancelledShutsDown() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<25)
        let transport = InMemoryTransport()
        let uploader = try Uploader(log: log, configuration: testDelivery(), transport: transport)
        let running = Task { await uploader.run(shutdownGrace: .seconds(60)) }
        running.cancel()
        await running.value
        #expect(uploader.stats.pendingEvents == 0)
        #expect(uploader.stats.sentEvents == 25)
        let after = await uploader.flush()
        guard case .failed(let error) = after.outcome else {
            Issue.record("a flush after run() was cancelled: \(after)")
            return
        }
        #expect(error.code == .stopped)
    }
}
