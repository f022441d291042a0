import BeaconTestSupport
import BeaconTesting
import Dispatch
import Foundation
import Synchronization
import Testing
@testable import Beacon

/// Delivery runs on the uploader's own thread: while every thread of Swift's cooperative pool is
/// blocked (an application's blocking code, or a loaded test run), a tracker still delivers what
/// its count trigger asks for. Before, the delivery loop waited for a pool thread to wake up.
@Suite("Delivery never waits for a thread of the cooperative pool")
struct DeliveryOwnThreadTests {
    @Test func aTrackerDeliversWhileEveryPoolThreadIsBlocked() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let collector = try LoopbackCollector()
        defer { collector.stop() }
        var config = Beacon.Configuration(directory: dir.path, serverURL: collector.url)
        config.lifecycleEvents = false
        config.diagnostics = { _ in }
        config.delivery?.flushInterval = nil
        config.delivery?.flushBulkSize = 10
        let beacon = try Beacon(configuration: config)

        // One blocker per pool thread; each holds its thread until released. The width of the
        // pool is the number of active processors.
        let width = ProcessInfo.processInfo.activeProcessorCount
        let release = DispatchSemaphore(value: 0)
        let running = Running()
        for _ in 0..<width {
            Task.detached {
                running.count.add(1, ordering: .relaxed)
                release.wait()
            }
        }
        // The trial runs on a thread of its own: every pool thread is about to be blocked.
        let trial: (allBlocked: Bool, delivered: Int) = await withCheckedContinuation { continuation in
            Thread {
                defer { for _ in 0..<width { release.signal() } }
                let allBlocked = eventually(within: 60) { running.count.load(ordering: .relaxed) == width }
                guard allBlocked else { continuation.resume(returning: (false, 0)); return }
                for n in 0..<50 { beacon.track("Numbered", properties: ["n": .int(n)]) }
                _ = eventually(within: 60) { collector.acceptedEvents.count >= 50 }
                continuation.resume(returning: (true, collector.acceptedEvents.count))
            }.start()
        }
        await beacon.shutdown()
        // Blockers that never all ran (a pool wider than the processors, or other tests holding
        // its threads for a minute) leave nothing proven, and nothing failed either.
        guard trial.allBlocked else { return }
        #expect(trial.delivered == 50, "delivered \(trial.delivered) of 50 while the pool was blocked")
        #expect(collector.acceptedEvents.compactMap { numberedN($0) } == Array(0..<50))
    }

    final class Running: Sendable {
        let count = Atomic<Int>(0)
    }
}
