import Foundation
import Testing
@testable import Beacon
import BeaconLog
import BeaconTesting
import BeaconTestSupport

/// The property `n` of a tracked event's bytes.
func numberedN(_ event: some Collection<UInt8>) -> Int? {
    guard let object = try? JSONSerialization.jsonObject(with: Data(event)) as? [String: Any],
          let properties = object["properties"] as? [String: Any] else { return nil }
    return properties["n"] as? Int
}

@Suite("Delivery: the tracker's flush, shutdown and run", .timeLimit(.minutes(1)))
struct DeliveryBeaconTests {
    func configuration(_ dir: DeliveryTempDir, _ collector: LoopbackCollector?, configure: (inout DeliveryConfiguration) -> Void = { _ in }) -> Beacon.Configuration {
        var config = Beacon.Configuration(directory: dir.path, serverURL: collector?.url)
        config.lifecycleEvents = false
        config.diagnostics = { _ in }
        var delivery = DeliveryConfiguration(url: collector?.url ?? URL(string: "http://127.0.0.1:9/")!)
        delivery.flushInterval = nil
        delivery.batchSize = 10
        configure(&delivery)
        config.delivery = collector == nil ? nil : delivery
        return config
    }

    @Test("flush sends everything tracked before it, in order, and reports drained")
    func flush() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let collector = try LoopbackCollector()
        defer { collector.stop() }
        let beacon = try Beacon(configuration: configuration(dir, collector))
        for n in 0..<35 { beacon.track("Numbered", properties: ["n": .int(n)]) }
        let result = await beacon.flush()
        // The delivery loop starts with the first commit: its pass may deliver some or all of the
        // events before the flush (what a pass the flush waits for sends counts as the flush's; a
        // pass that ended before does not). A loaded run had it send all 35 first: no data then.
        switch result.outcome {
        case .drained: break
        case .noData where result.sent == 0: break
        default: Issue.record("expected drained (or no data, all sent by the loop), got \(result)"); return
        }
        #expect(result.sent <= 35 && result.remaining == 0, "\(result)")
        #expect(collector.acceptedEvents.compactMap { numberedN($0) } == Array(0..<35))
        let again = await beacon.flush()
        guard case .noData = again.outcome else { Issue.record("expected noData, got \(again)"); return }
        #expect(beacon.deliveryStats.sentEvents == 35)
        await beacon.shutdown()
    }

    /// swift-service-lifecycle's rule for libraries: `init` starts no task. The delivery loop of
    /// a tracker nobody runs starts when there is something to deliver (the writer's first
    /// commit, or events left by an earlier run), from the writer thread; under `run()` none.
    @Test("init starts no task: the delivery loop starts with the first commit, or not at all under run()")
    func initStartsNoTask() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let collector = try LoopbackCollector()
        defer { collector.stop() }
        let beacon = try Beacon(configuration: configuration(dir, collector))
        let uploader = try #require(beacon.delivery.uploader)
        func hasBackgroundLoop() -> Bool { uploader.scheduling.withLock { $0.backgroundLoop != nil } }
        #expect(!hasBackgroundLoop(), "init started the delivery loop's task")
        beacon.track("First")
        #expect(await eventually(30) { hasBackgroundLoop() }, "the first commit did not start the delivery loop")
        #expect(await eventually(30) { collector.acceptedEvents.count == 1 })
        await beacon.shutdown()

        // Under run(), attached before the first commit: no task of the tracker's own, ever.
        let run = try Beacon(configuration: configuration(dir, collector) { $0.flushBulkSize = 1 })
        let running = Task { await run.run() }
        let runUploader = try #require(run.delivery.uploader)
        #expect(await eventually(30) { runUploader.scheduling.withLock { $0.machine.loop.id != 0 } })
        run.track("Second")
        try run.sync()
        #expect(await eventually(30) { collector.acceptedEvents.count == 2 })
        #expect(runUploader.scheduling.withLock { $0.backgroundLoop == nil })
        running.cancel()
        await running.value
    }

    @Test("the writer's append hook triggers an upload at flushBulkSize pending events")
    func countTrigger() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let collector = try LoopbackCollector()
        defer { collector.stop() }
        let beacon = try Beacon(configuration: configuration(dir, collector) { $0.flushBulkSize = 20 })
        for n in 0..<45 { beacon.track("Numbered", properties: ["n": .int(n)]) }
        try beacon.sync()
        // The trigger promises a pass whenever flushBulkSize events are pending, not one per
        // flushBulkSize events: a pass sends everything readable when it reads, so how many it
        // leaves depends on the writer's timing (up to flushBulkSize - 1 stay pending until the
        // next interval or flush). What must hold: the passes bring the pending events below
        // flushBulkSize, and every event not pending was accepted, once, in order. (A lost
        // trigger leaves 20 or more pending.) The poll's generous bound only matters under load:
        // a fresh clone's full suite on a loaded 2-core machine once delivered nothing within 20 s
        // (the two threads of the cooperative pool busy with other tests' blocking waits).
        let settled = await eventually(120) {
            let pending = beacon.deliveryStats.pendingEvents
            return pending < 20 && collector.acceptedEvents.count + Int(pending) == 45
        }
        let pending = beacon.deliveryStats.pendingEvents
        #expect(settled, "pending \(pending), accepted \(collector.acceptedEvents.count)")
        // One snapshot: a pass may still be delivering the rest while this reads.
        let accepted = collector.acceptedEvents
        #expect(accepted.count > 45 - 20)
        #expect(accepted.compactMap { numberedN($0) } == Array(0..<accepted.count))
        await beacon.shutdown()
    }

    @Test("events left by an earlier run without a collector are sent after the next start")
    func pendingFromEarlierRun() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        do {
            let offline = try Beacon(configuration: configuration(dir, nil))
            for n in 0..<15 { offline.track("Numbered", properties: ["n": .int(n)]) }
            let report = await offline.shutdown()
            #expect(report.remaining == 15)
            guard case .failed = report.outcome else { Issue.record("expected failed (no serverURL), got \(report)"); return }
        }
        let collector = try LoopbackCollector()
        defer { collector.stop() }
        let beacon = try Beacon(configuration: configuration(dir, collector))
        #expect(await eventually { collector.acceptedEvents.count == 15 })
        #expect(collector.acceptedEvents.compactMap { numberedN($0) } == Array(0..<15))
        await beacon.shutdown()
    }

    @Test("shutdown drains, closes the log (locks released) and wakes run(); later calls get the same report")
    func shutdownDrainsAndRunReturns() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let collector = try LoopbackCollector()
        defer { collector.stop() }
        var config = configuration(dir, collector)
        config.lifecycleEvents = true
        let beacon = try Beacon(configuration: config)
        let running = Task { await beacon.run() }
        for n in 0..<23 { beacon.track("Numbered", properties: ["n": .int(n)]) }
        let report = await beacon.shutdown(timeout: .seconds(60))
        guard case .drained = report.outcome else { Issue.record("expected drained, got \(report)"); return }
        await running.value
        #expect(report.remaining == 0)
        let events = collector.acceptedEvents
        #expect(events.compactMap { numberedN($0) } == Array(0..<23))
        #expect(String(decoding: events.last ?? [], as: UTF8.self).contains("$AppEnd"), "$AppEnd goes out with the last batch")
        let second = await beacon.shutdown()
        #expect(second.sent == report.sent)
        // The locks are free: another tracker opens the directory.
        let reopened = try Beacon(configuration: configuration(dir, nil))
        reopened.closeNow()
    }

    @Test("cancelling run() shuts the tracker down")
    func cancelRun() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let collector = try LoopbackCollector()
        defer { collector.stop() }
        var config = configuration(dir, collector)
        // The grace bounds the drain, which takes milliseconds; a loaded 2-core machine can stall it
        // for seconds, and what is not sent by the grace stays on disk (this test expects all sent).
        config.shutdownGrace = .seconds(60)
        let beacon = try Beacon(configuration: config)
        for n in 0..<5 { beacon.track("Numbered", properties: ["n": .int(n)]) }
        let running = Task { await beacon.run() }
        running.cancel()
        await running.value
        #expect(collector.acceptedEvents.compactMap { numberedN($0) } == Array(0..<5))
    }

    @Test("shutdown honours its deadline when the collector never answers; the events stay on disk")
    func shutdownDeadline() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let collector = try LoopbackCollector()
        defer { collector.stop() }
        collector.defaultReply = .never
        // An hour: waiting for the request's timeout would show as a time-limit failure, while
        // the bound below allows for a loaded machine's stalls (over 10 s under AddressSanitizer).
        let beacon = try Beacon(configuration: configuration(dir, collector) { $0.requestTimeout = .seconds(3600) })
        for n in 0..<12 { beacon.track("Numbered", properties: ["n": .int(n)]) }
        let clock = ContinuousClock()
        let began = clock.now
        let report = await beacon.shutdown(timeout: .milliseconds(400))
        let elapsed = began.duration(to: clock.now)
        guard case .deadlineReached = report.outcome else { Issue.record("expected deadlineReached, got \(report)"); return }
        #expect(elapsed < .seconds(120), "\(elapsed): far below the request timeout (an hour), allowing for a loaded machine")
        #expect(report.remaining == 12)
        let log = try BeaconLog(directory: dir.path)
        #expect(log.stats.pendingRecords == 12)
    }
}
