import Foundation
import Testing
@testable import Beacon
import BeaconTesting

@Suite("Delivery: every loss is counted exactly and shown where the user looks", .timeLimit(.minutes(1)))
struct DeliveryLossTests {
    /// A tracker on a tiny quota (two 4 KiB segments) uploading through `transport`.
    func tracker(_ dir: DeliveryTempDir, _ transport: InMemoryTransport, diagnostics: DiagnosticsSink) throws -> Beacon {
        var config = Beacon.Configuration(directory: dir.path, serverURL: URL(string: "http://127.0.0.1:9/events")!)
        config.lifecycleEvents = false
        config.storage.segmentBytes = 4096
        config.storage.maxBytes = 2 * 4096
        config.transport = transport
        let sink = diagnostics.handler
        config.diagnostics = { sink("\($0.kind.rawValue): \($0.message)") }
        var delivery = testDelivery(batch: 10)
        delivery.flushBulkSize = 1_000_000
        config.delivery = delivery
        return try Beacon(configuration: config)
    }

    /// The distinct `n` of every event the collector accepted.
    func delivered(_ transport: InMemoryTransport) -> Set<Int> {
        Set(transport.requests.flatMap { request in
            (BatchSplitter.events(in: request.body) ?? []).compactMap { numberedN($0) }
        })
    }

    /// A burst over the quota while the uploader holds a batch in flight: the batch read before
    /// the drop and delivered after it is not counted as dropped; everything else deleted is,
    /// exactly; stats, flush results, the shutdown report and a diagnostic all say so.
    @Test func burstOverTheQuotaIsCountedExactly() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let transport = InMemoryTransport()
        let diagnostics = DiagnosticsSink()
        let beacon = try tracker(dir, transport, diagnostics: diagnostics)
        var tracked = 0
        func track(_ count: Int) {
            for _ in 0..<count {
                beacon.track("Numbered", properties: ["n": .int(tracked), "pad": .string(String(repeating: "x", count: 100))])
                tracked += 1
            }
        }
        // A batch read from the oldest segment and held in flight.
        track(10)
        transport.hold()
        let inFlight = Task { await beacon.flush() }
        await transport.waitForRequests(count: 1)
        #expect(diagnostics.all.filter { $0.hasPrefix("dropped") }.isEmpty)
        // The burst: the quota deletes the segment the batch came from, and more.
        track(300)
        try beacon.sync()
        let droppedDuringBurst = beacon.stats.dropped[.quotaDeleted, default: 0]
        #expect(droppedDuringBurst > 100)
        transport.release()
        let first = await inFlight.value
        // The held batch was delivered: it no longer counts as dropped.
        #expect(delivered(transport).isSuperset(of: 0..<10))
        #expect(beacon.stats.dropped[.quotaDeleted] == droppedDuringBurst - 10)
        #expect(first.dropped[.quotaDeleted] == droppedDuringBurst - 10, "\(first)")
        let rest = await beacon.flush()
        #expect(rest.outcome.isComplete, "\(rest)")
        let report = await beacon.shutdown()
        let sent = UInt64(delivered(transport).count)
        let dropped = beacon.stats.dropped[.quotaDeleted, default: 0]
        #expect(sent + dropped + report.remaining == UInt64(tracked), "delivered \(sent) + dropped \(dropped) + pending \(report.remaining) == tracked \(tracked)")
        #expect(report.remaining == 0)
        #expect(UInt64(transport.requests.reduce(0) { $0 + (BatchSplitter.events(in: $1.body)?.count ?? 0) }) == sent, "nothing sent twice")
        #expect(report.dropped[.quotaDeleted] == dropped)
        #expect(report.droppedTotal == dropped)
        #expect(report.description.contains("dropped \(dropped)"), "\(report)")
        #expect(rest.dropped[.quotaDeleted] == dropped)
        #expect(beacon.deliveryStats.droppedEvents == dropped)
        // One diagnostic for the first drop (later ones are rate-limited), naming the quota.
        let drops = diagnostics.all.filter { $0.hasPrefix("dropped") }
        #expect(drops.count == 1, "\(drops)")
        #expect(drops.first?.contains("maxBytes 8192") == true, "\(drops)")
    }

    /// Without delivery (no collector), the quota's drops still show in stats, the shutdown
    /// report and a diagnostic.
    @Test func dropsWithoutDeliveryAreReported() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        var config = Beacon.Configuration(directory: dir.path)
        config.lifecycleEvents = false
        config.storage.segmentBytes = 4096
        config.storage.maxBytes = 2 * 4096
        let diagnostics = DiagnosticsSink()
        let sink = diagnostics.handler
        config.diagnostics = { sink("\($0.kind.rawValue): \($0.message)") }
        let beacon = try Beacon(configuration: config)
        for n in 0..<200 { beacon.track("Numbered", properties: ["n": .int(n), "pad": .string(String(repeating: "x", count: 100))]) }
        try beacon.sync()
        let dropped = beacon.stats.dropped[.quotaDeleted, default: 0]
        #expect(dropped > 50)
        let report = await beacon.shutdown()
        #expect(report.dropped[.quotaDeleted] == dropped)
        #expect(dropped + report.remaining == 200)
        #expect(diagnostics.all.filter { $0.hasPrefix("dropped") }.count == 1)
    }

    /// Uploads racing a burst over the quota, many times: whatever the interleaving of reads,
    /// acknowledgements and drops, delivered + dropped + pending == tracked, exactly.
    @Test(arguments: 0..<4)
    func uploadsRacingTheQuotaBalanceExactly(round: Int) async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let transport = InMemoryTransport()
        var config = Beacon.Configuration(directory: dir.path, serverURL: URL(string: "http://127.0.0.1:9/events")!)
        config.lifecycleEvents = false
        config.storage.segmentBytes = 4096
        config.storage.maxBytes = 3 * 4096
        config.transport = transport
        config.diagnostics = { _ in }
        var delivery = testDelivery(batch: 5 + round)
        delivery.flushBulkSize = 1
        config.delivery = delivery
        let beacon = try Beacon(configuration: config)
        let tracked = 3000
        for n in 0..<tracked {
            beacon.track("Numbered", properties: ["n": .int(n), "pad": .string(String(repeating: "x", count: 60))])
            if n % 100 == 0 { await Task.yield() }
        }
        let report = await beacon.shutdown()
        #expect(report.remaining == 0, "\(report)")
        let sent = UInt64(delivered(transport).count)
        let dropped = report.dropped[.quotaDeleted, default: 0]
        #expect(sent + dropped + report.remaining == UInt64(tracked), "delivered \(sent) + dropped \(dropped) + pending \(report.remaining) == tracked \(tracked)")
    }
}
