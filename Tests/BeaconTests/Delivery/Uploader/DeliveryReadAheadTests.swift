import Foundation
import Synchronization
import Testing
@testable import Beacon
import BeaconLog
import BeaconTestSupport
import BeaconTesting

/// While a request is in flight the uploader reads the next batch and builds its body. Whatever
/// happens meanwhile (events appended, the request refused and retried, the batch size switching
/// to catch-up), requests still go out in order, each from the first event not yet delivered,
/// cut as a fresh read would cut them, and a retried batch goes with the body and key it had.
@Suite("Delivery: the next batch read while a request is in flight", .timeLimit(.minutes(1)))
struct DeliveryReadAheadTests {
    @Test("random answers, appends during requests and batch sizes: every event once, in order, each request from the first undelivered event", arguments: 0..<24)
    func orderUnderRandomSchedules(seed: UInt64) async throws {
        var random = SplitMix(seed: seed)
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let initial = Int.random(in: 0...60, using: &random)
        let log = try deliveryLog(dir, events: 0..<initial)
        let appended = Atomic<Int>(initial)
        // Decided up front, per request: the answer and how many events arrive during it.
        // Events arrive during the first 60 requests only, so that even batches of one catch up.
        let plan = (0..<400).map { i in (status: Int.random(in: 0..<5, using: &random) == 0 ? 500 : 200, arrivals: i < 60 && Int.random(in: 0..<4, using: &random) == 0 ? Int.random(in: 1...12, using: &random) : 0) }
        let transport = InMemoryTransport()
        let requestCount = Atomic<Int>(0)
        transport.setHandler { _ in
            let step = plan[requestCount.add(1, ordering: .relaxed).oldValue % plan.count]
            for _ in 0..<step.arrivals {
                let next = appended.add(1, ordering: .relaxed).oldValue
                _ = try? log.append(deliveryEvent(next))
            }
            return .status(step.status)
        }
        var config = testDelivery(batch: Int.random(in: 1...9, using: &random))
        switch Int.random(in: 0..<3, using: &random) {
        case 0: config.catchUpBatchSize = nil  // the default: up to maxBatchBytes while behind
        case 1: config.catchUpBatchSize = 2 * config.batchSize + 1
        default: break  // batchSize always
        }
        config.isolateAfterFailures = 1000  // random 500s are not a bad event
        let uploader = try Uploader(log: log, configuration: config, transport: transport, clock: ManualClock(), diagnostics: { _ in })
        var flushes = 0
        while log.stats.pendingRecords > 0 || flushes == 0 {
            _ = await uploader.flush()
            flushes += 1
            try #require(flushes < 500, "delivery made no progress")
        }
        let total = appended.load(ordering: .relaxed)
        var delivered = 0
        var lastFailed: TransportRequest?
        for (i, request) in transport.requests.enumerated() {
            let ids = trackIDs(in: request)
            try #require(!ids.isEmpty)
            #expect(ids == Array(delivered..<delivered + ids.count), "request \(i) starts at the first undelivered event and holds consecutive events")
            #expect(ids.count <= max(config.batchSize, config.catchUpBatchSize ?? Int.max))
            if let failed = lastFailed {
                #expect(request.headers["Idempotency-Key"] == failed.headers["Idempotency-Key"], "a refused batch is sent again as it was")
            }
            if plan[i % plan.count].status == 200 {
                delivered += ids.count
                lastFailed = nil
            } else {
                lastFailed = request
            }
        }
        #expect(delivered == total, "every event delivered once")
        #expect(log.checkpoint.seq == UInt64(total))
    }
}
