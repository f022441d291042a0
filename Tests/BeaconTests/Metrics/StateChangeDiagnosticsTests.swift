import Foundation
import Synchronization
import Testing
@testable import Beacon
import BeaconLog
import BeaconTesting
import BeaconTestSupport

/// Issue 28: state changes an operator can see, once each. The outage and the stall are told
/// apart from every other diagnostic by their words, so that these tests also run (and fail) on
/// code from before the diagnostics had subjects.
@Suite("State changes: paused/resumed, stalled/recovered, quota, once each", .timeLimit(.minutes(1)))
struct StateChangeDiagnosticsTests {
    @Test("a 20 s collector outage under load gives exactly one paused and one resumed diagnostic")
    func outageOnce() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<20)
        let down = Atomic<Bool>(true)
        let transport = InMemoryTransport()
        transport.setHandler { _ in down.load(ordering: .relaxed) ? .failure(TransportError(.network, "connection refused")) : .status(200) }
        let clock = ManualClock()
        let diagnostics = Mutex<[String]>([])
        var config = testDelivery(batch: 10)
        config.backoff = .init(initial: .seconds(1), maximum: .seconds(4), jitter: false)
        let uploader = try Uploader(log: log, configuration: config, transport: transport, clock: clock,
                                    diagnostics: { d in diagnostics.withLock { $0.append(d.message) } })
        uploader.start()
        // The outage: every attempt fails for 20 s of the uploader's clock while events keep coming.
        var appended = 20
        while clock.now.offset < .seconds(20) {
            await clock.waitForSleepers(count: 1)
            for _ in 0..<5 {
                try log.append(deliveryEvent(appended))
                appended += 1
            }
            clock.advanceToNextDeadline()
        }
        let attempts = transport.requests.count
        #expect(attempts >= 6, "the outage saw \(attempts) attempts")
        // The last attempt of the outage failed too, and the loop waits for its backoff.
        await clock.waitForSleepers(count: 1)
        // The outage's appends are durable before the loop's next pass: a pass delivers what is
        // committed. (Without this sync the group commit, 10 ms of real time, may come after the
        // pass; the pass then rightly ends with them not yet readable, and with no flush interval
        // and fewer than flushBulkSize committed, nothing starts another.)
        try log.sync()
        down.store(false, ordering: .relaxed)
        clock.advanceToNextDeadline()
        let total = appended
        #expect(await eventually { uploader.stats.sentEvents == UInt64(total) })
        _ = await uploader.shutdown()
        let lines = diagnostics.withLock { $0 }
        let paused = lines.filter { $0.contains(" paused") && !$0.contains("resumed") }
        let resumed = lines.filter { $0.contains("resumed") }
        #expect(paused.count == 1, "\(lines)")
        #expect(resumed.count == 1, "\(lines)")
        #expect(lines.count == 2, "nothing more: \(lines)")
        // The pause says why, since when and how much is pending; the resumption after how long.
        #expect(paused.first?.contains("connection refused") == true)
        #expect(paused.first?.contains("20 events pending") == true)
        #expect(resumed.first.map { $0.contains("after 2") && $0.contains(" s paused") } == true, "\(resumed)")
    }

    @Test("beside a writer in another process (beacon send --follow), the paused and resumed lines count the events on disk, those appended during the outage too")
    func sidecarCountsWhatIsOnDisk() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let (writer, reader) = try sidecarLogs(dir)
        defer { try? writer.close(); try? reader.close() }
        func append(_ range: Range<Int>) throws {
            for i in range { try writer.append(deliveryEvent(i)) }
            try writer.sync()
        }
        let down = Atomic<Bool>(true)
        let transport = InMemoryTransport()
        transport.setHandler { _ in down.load(ordering: .relaxed) ? .failure(TransportError(.network, "connection refused")) : .status(200) }
        let diagnostics = Mutex<[String]>([])
        let uploader = try Uploader(log: reader, configuration: testDelivery(batch: 10), transport: transport, clock: ManualClock(),
                                    diagnostics: { d in diagnostics.withLock { $0.append(d.message) } })
        // The other process appends while the collector is down: 35 on disk when the pause is
        // reported, of which the reader knows those it has read.
        try append(0..<35)
        let failed = await uploader.flush()
        #expect(failed.sent == 0)
        // And goes on during the outage: 50 on disk, 10 of them delivered by the first request.
        try append(35..<50)
        down.store(false, ordering: .relaxed)
        let result = await uploader.flush()
        #expect(result.sent == 50, "\(result)")
        let lines = diagnostics.withLock { $0 }
        let paused = lines.filter { $0.contains(" paused since") }
        let resumed = lines.filter { $0.contains(" resumed after") }
        #expect(paused.count == 1 && paused[0].contains("; 35 events pending"), "\(lines)")
        // 40 or 50: the first request's acknowledgement may be made durable before or after the line.
        #expect(resumed.count == 1 && (resumed[0].hasSuffix(", 40 pending") || resumed[0].hasSuffix(", 50 pending")), "\(lines)")
    }

    @Test("a collector that flaps: one pause reported per interval, the others counted in the next")
    func flappingIsRateLimited() {
        var health = DeliveryHealth(interval: .seconds(10))
        var reports: [DeliveryHealth.Report] = []
        // Down for 1 s, up for 1 s, ten times: only the first pause and its end are reported.
        for second in stride(from: 0, to: 20, by: 2) {
            if let r = health.failed(at: .seconds(second), millis: 0, reason: "HTTP 503") { reports.append(r) }
            if let r = health.failed(at: .seconds(second) + .milliseconds(500), millis: 0, reason: "HTTP 503") { reports.append(r) }
            if let r = health.delivered(at: .seconds(second + 1)) { reports.append(r) }
        }
        #expect(reports == [.paused(heldBack: 0), .resumed(after: .seconds(1), reason: "HTTP 503"), .paused(heldBack: 4), .resumed(after: .seconds(1), reason: "HTTP 503")])
        // Every state: a success while running reports nothing; a pause announced by its caller
        // counts as reported and its end is reported.
        var quiet = DeliveryHealth(interval: .seconds(10))
        #expect(quiet.delivered(at: .zero) == nil)
        #expect(quiet.failed(at: .seconds(1), millis: 0, reason: "HTTP 401", announced: true) == nil)
        #expect(quiet.isPaused)
        #expect(quiet.delivered(at: .seconds(4)) == .resumed(after: .seconds(3), reason: "HTTP 401"))
        #expect(!quiet.isPaused)
    }

    @Test("a writer stalled for 2.5 s gives exactly one stalled and one recovered diagnostic")
    func stallOnce() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("beacon-stall-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let collected = DiagnosticsCollector()
        var config = Beacon.Configuration.testing(dir, diagnostics: collected)
        config.diagnosticsInterval = .zero
        let beacon = try Beacon(configuration: config)
        beacon.track("Before")
        try await offPool { try beacon.sync() }
        beacon.setWriterFrozen(true)
        // Under load: events keep coming while the disk is stuck, for 2.5 s and until the stall was
        // reported (its check runs 1 s after the commit began; a loaded 2-core machine can run it
        // late, and a report after the thaw would find the commit done). Bounded for a broken check.
        let start = ContinuousClock.now
        var i = 0
        while ContinuousClock.now - start < .milliseconds(2500)
            || (!collected.all.contains { $0.message.contains("has not completed a commit") } && ContinuousClock.now - start < .seconds(40)) {
            beacon.track("During", properties: ["i": .int(i)])
            i += 1
            try await Task.sleep(for: .milliseconds(20))
        }
        beacon.setWriterFrozen(false)
        try await offPool { try beacon.sync() }
        // Let a late check (one was armed when the stall began) run: it must not report again.
        try await Task.sleep(for: .milliseconds(1200))
        beacon.track("After")
        try await offPool { try beacon.sync() }
        await beacon.close()
        let messages = collected.all.map(\.message)
        let stalled = messages.filter { $0.contains("has not completed a commit") }
        let recovered = messages.filter { $0.contains("writer recovered") }
        #expect(stalled.count == 1, "\(messages)")
        #expect(recovered.count == 1, "\(messages)")
        #expect(messages.count == 2, "nothing more: \(messages)")
    }

    @Test("the quota's thresholds: 80 % then 100 %, once each on the way up, again only after falling well below")
    func quotaThresholds() {
        var watch = QuotaWatch()
        var seen: [Int] = []
        for percent in [10, 50, 79, 80, 85, 99, 80, 75, 100, 100, 98, 100] {
            if let level = watch.observe(used: UInt64(percent), max: 100, reached: false) { seen.append(level) }
        }
        #expect(seen == [80, 100])
        // Below 70 % the 80 % threshold is reported again; the quota acting is 100 % at any use.
        #expect(watch.observe(used: 60, max: 100, reached: false) == nil)
        #expect(watch.observe(used: 81, max: 100, reached: false) == 80)
        #expect(watch.observe(used: 81, max: 100, reached: true) == nil, "100 % is reported until use falls below 50 %")
        #expect(watch.observe(used: 40, max: 100, reached: false) == nil)
        #expect(watch.observe(used: 45, max: 100, reached: true) == 100)
        // Every percentage from 0 to 120 in one climb reports each threshold exactly once.
        var climb = QuotaWatch()
        let levels = (0...120).compactMap { climb.observe(used: UInt64($0), max: 100, reached: false) }
        #expect(levels == [80, 100])
    }

    @Test("a tracker whose quota fills reports 80 % and 100 % once each, with severities")
    func quotaDiagnostics() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("beacon-quota-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let collected = DiagnosticsCollector()
        var config = Beacon.Configuration.testing(dir, diagnostics: collected)
        config.storage.segmentBytes = 16 * 1024
        config.storage.maxBytes = 256 * 1024
        config.diagnosticsInterval = .zero
        let beacon = try Beacon(configuration: config)
        let padding = String(repeating: "x", count: 900)
        for i in 0..<600 {
            beacon.track("Fill", properties: ["i": .int(i), "pad": .string(padding)])
            if i % 20 == 0 { try await offPool { try beacon.sync() } }
        }
        try await offPool { try beacon.sync() }
        await beacon.close()
        let quota = collected.all.filter { $0.subject == "quota80" || $0.subject == "quota100" }
        #expect(quota.map(\.subject) == ["quota80", "quota100"], "\(collected.all.map(\.message))")
        #expect(quota.map(\.severity) == [.warning, .error])
    }
}
