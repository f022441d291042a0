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
            if ending == .runCancelled { runner = Task { await uploader.run() } } else { uploader.start() }
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
}
