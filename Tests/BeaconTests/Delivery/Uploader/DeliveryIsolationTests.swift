import Foundation
import Synchronization
import Testing
@testable import Beacon
import BeaconLog
import BeaconTesting

/// Runs `body` while moving `clock` to each sleeper's deadline as soon as one sleeps, so backoffs
/// pass at once and a test reads the manual time the uploader spent. Sleepers at or after `limit`
/// (a shutdown's deadline, which sleeps while work goes on) are left asleep.
func advancing<T: Sendable>(_ clock: ManualClock, before limit: Duration? = nil, _ body: @escaping @Sendable () async -> T) async -> T {
    let done = Mutex(false)
    let advancer = Task {
        while !done.withLock({ $0 }) {
            if let next = clock.nextDeadline, limit.map({ next.offset < $0 }) ?? true { clock.advanceToNextDeadline() } else { await Task.yield() }
        }
    }
    let value = await body()
    done.withLock { $0 = true }
    await advancer.value
    return value
}

/// ClickHouse's answer to a row it cannot parse: HTTP 500 with its explanation.
let clickHouseParseError = "Code: 27. DB::Exception: Cannot parse input: expected '\"' before: 'POISON': (at row 1) (CANNOT_PARSE_INPUT_ASSERTION_FAILED) (version 18.16.1)"

func containsPoison(_ request: TransportRequest) -> Bool {
    String(decoding: request.body, as: UTF8.self).contains("POISON")
}

/// A collector model over an in-memory transport: `refuse` picks the failing answer for a
/// request (nil: 200); the events of 2xx requests are recorded in order. The transport's handler
/// holds the collector weakly: a strong one would be a cycle (collector → transport → handler →
/// collector) that keeps every request's body alive, which LeakSanitizer reports (.ci/run).
final class Collector: Sendable {
    let transport = InMemoryTransport()
    let accepted = Mutex<[[UInt8]]>([])

    init(refuse: @escaping @Sendable (TransportRequest) -> InMemoryTransport.Reply?) {
        transport.setHandler { [weak self] request in
            if let reply = refuse(request) { return reply }
            let received = events(in: request)
            self?.accepted.withLock { $0 += received }
            return nil
        }
    }

    /// The `_track_id`s of the accepted events (a log written by `deliveryLog`).
    var acceptedIDs: [Int] { trackIDs(accepted.withLock { $0 }) }
    /// The property `n` of the accepted events (events a tracker tracked as `Numbered`).
    var acceptedNumbers: [Int] { accepted.withLock { $0 }.compactMap { numberedN($0) } }
}

@Suite("Delivery: a bad event never stalls the queue; flush and shutdown retry until their deadline", .timeLimit(.minutes(1)))
struct DeliveryIsolationTests {
    @Test("a collector answering 500 to any batch holding a marked event: only that event is set aside (status and body), everything else is delivered in order", arguments: [0, 13, 29])
    func poisonAnswered500(poison: Int) async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<30, markerAt: [poison])
        let collector = Collector { containsPoison($0) ? .status(500, body: clickHouseParseError) : nil }
        let clock = ManualClock()
        let sink = DiagnosticsSink()
        let uploader = try Uploader(log: log, configuration: testDelivery(batch: 10), transport: collector.transport, clock: clock, diagnostics: { sink.handler($0.message) })
        let result = await advancing(clock) { await uploader.flush(timeout: .seconds(600)) }
        guard case .drained = result.outcome else { Issue.record("expected drained, got \(result)"); return }
        #expect(result.sent == 29 && result.remaining == 0)
        #expect(collector.acceptedIDs == Array(0..<30).filter { $0 != poison })
        let rejected = dir.rejectedLines
        #expect(rejected.count == 1)
        let line = try #require(rejected.first)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect(object["status"] as? Int == 500)
        #expect((object["reason"] as? String)?.contains(clickHouseParseError) == true, "\(line)")
        #expect((object["record"] as? [String: Any])?["_track_id"] as? Int == poison)
        #expect(uploader.stats.rejectedEvents == 1)
        #expect(sink.all.contains { $0.contains("set aside 1 event") && $0.contains("CANNOT_PARSE_INPUT") })
        #expect(clock.now.offset < .seconds(60), "isolated after the backoffs of K = 3 failed attempts, not at the deadline")
    }

    /// A tracker's configuration sending to `collector` with `delivery`, on `clock`, quiet.
    func trackerConfiguration(_ dir: DeliveryTempDir, _ collector: Collector, _ clock: ManualClock, _ delivery: DeliveryConfiguration) -> Beacon.Configuration {
        var config = Beacon.Configuration(directory: dir.path, serverURL: delivery.url)
        config.lifecycleEvents = false
        config.diagnostics = { _ in }
        config.transport = collector.transport
        config.monotonicClock = clock
        config.delivery = delivery
        return config
    }

    @Test("the tracker's shutdown(deadline: 40 s) drains past a row the collector answers with 500; only that row is set aside")
    func trackerShutdownPastAPoisonRow() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let collector = Collector { containsPoison($0) ? .status(500, body: clickHouseParseError) : nil }
        let clock = ManualClock()
        var delivery = DeliveryConfiguration(url: URL(string: "http://127.0.0.1:9/events")!)
        delivery.flushInterval = nil
        delivery.flushBulkSize = 1_000_000
        let config = trackerConfiguration(dir, collector, clock, delivery)
        let beacon = try Beacon(configuration: config)
        for n in 0..<500 { beacon.track("Numbered", properties: ["n": .int(n), "item": .string(n == 321 ? "POISON" : "book")]) }
        // The background loop's first pass (for events of earlier runs) may, on a loaded machine,
        // start only after some events were tracked and deliver them, even all of them, before
        // the shutdown begins: those are not the shutdown's to report, and how many they are
        // cannot be read without a race. So the report may be `noData` (sent 0) when that pass
        // ended first; what the shutdown promises is checked on the collector and on disk.
        let report = await advancing(clock, before: .seconds(40)) { await beacon.shutdown(timeout: .seconds(40)) }
        switch report.outcome {
        case .drained: break
        case .noData where report.sent == 0: break
        default: Issue.record("expected drained, or no data left for the shutdown, got \(report)"); return
        }
        #expect(collector.acceptedNumbers == Array(0..<500).filter { $0 != 321 }, "each event once, in order")
        #expect(report.remaining == 0 && report.sent <= 499, "\(report)")
        #expect(dir.rejectedLines.count == 1 && dir.rejectedLines[0].contains(#""n":321"#))
        #expect(clock.now.offset <= .seconds(40))
    }

    @Test("a restart's backlog with a poison row: the loop's first pass delivers up to it and backs off; shutdown(deadline: 40 s) then drains the rest, reporting what it sent")
    func trackerShutdownAfterTheLoopStoppedAtAPoisonRow() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        try deliveryLog(dir, events: 0..<500, markerAt: [321]).close()
        let collector = Collector { containsPoison($0) ? .status(500, body: clickHouseParseError) : nil }
        let clock = ManualClock()
        let config = trackerConfiguration(dir, collector, clock, testDelivery(batch: 10))
        let beacon = try Beacon(configuration: config)
        // The loop's first pass delivers 0..<320, fails on the batch holding 321 and sleeps its backoff.
        let waitStart = ContinuousClock.now
        while collector.acceptedIDs.count < 320 || clock.nextDeadline == nil, ContinuousClock.now - waitStart < .seconds(60) {
            try await Task.sleep(for: .milliseconds(5))
        }
        #expect(collector.acceptedIDs == Array(0..<320))
        let report = await advancing(clock, before: .seconds(40)) { await beacon.shutdown(timeout: .seconds(40)) }
        // The clock advancing may end the loop's backoff before the shutdown reaches the uploader:
        // the loop's own pass (on its thread, at once) then delivers some or all of the rest, which
        // the shutdown does not report as its own (.noData when it found nothing left).
        #expect(report.outcome.isComplete && report.remaining == 0, "\(report)")
        #expect(collector.acceptedIDs == Array(0..<500).filter { $0 != 321 }, "each event once, in order")
        #expect(report.sent <= 499 - 320, "\(report)")
        #expect(dir.rejectedLines.count == 1 && dir.rejectedLines[0].contains(#""_track_id":321"#))
    }

    @Test("a collector down (every request 500, or no answer) for 40 s, then up: nothing is set aside, everything is delivered in order", arguments: [false, true])
    func outageThenUp(timeouts: Bool) async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<30)
        let clock = ManualClock()
        let collector = Collector { _ in
            guard clock.now.offset < .seconds(40) else { return nil }
            return timeouts ? .failure(TransportError(.timeout, "no answer within 5 s")) : .status(500, body: "starting up")
        }
        let uploader = try Uploader(log: log, configuration: testDelivery(batch: 10), transport: collector.transport, clock: clock)
        let result = await advancing(clock) { await uploader.flush(timeout: .seconds(600)) }
        guard case .drained = result.outcome else { Issue.record("expected drained, got \(result)"); return }
        #expect(dir.rejectedLines.isEmpty)
        #expect(collector.acceptedIDs == Array(0..<30))
        #expect(uploader.stats.rejectedEvents == 0)
        #expect(collector.transport.requests.count > 4, "it retried")
    }

    @Test("a restart resumes the isolation: delivery.inflight keeps the attempts at the batch")
    func isolationResumesAfterRestart() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        var log: BeaconLog? = try deliveryLog(dir, events: 0..<10, markerAt: [3])
        let collector = Collector { containsPoison($0) ? .status(500, body: clickHouseParseError) : nil }
        let first = try Uploader(log: log!, configuration: testDelivery(batch: 10), transport: collector.transport, clock: ManualClock())
        for _ in 0..<3 { _ = await first.flush() }
        #expect(collector.transport.requests.map { trackIDs(in: $0) } == Array(repeating: Array(0..<10), count: 3))
        try log!.close()
        log = nil
        let reopened = try BeaconLog(directory: dir.path)
        let clock = ManualClock()
        let second = try Uploader(log: reopened, configuration: testDelivery(batch: 10), transport: collector.transport, clock: clock)
        let result = await advancing(clock) { await second.flush(timeout: .seconds(600)) }
        guard case .drained = result.outcome else { Issue.record("expected drained, got \(result)"); return }
        #expect(trackIDs(in: collector.transport.requests[3]) == Array(0..<5), "the isolation goes on with the first half")
        #expect(collector.acceptedIDs == [0, 1, 2, 4, 5, 6, 7, 8, 9])
        #expect(dir.rejectedLines.count == 1)
        _ = first
    }

    @Test("a crash loop (sends whose answer was never seen) re-sends the batch whole with the same key; only failed answers start an isolation")
    func crashLoopKeepsTheBatchWhole() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<10)
        // What five killed processes leave: the batch sent five times, no answer seen.
        try Data("0 10 5\n".utf8).write(to: URL(fileURLWithPath: dir.path + "/delivery.inflight"))
        let collector = Collector { _ in nil }
        let uploader = try Uploader(log: log, configuration: testDelivery(batch: 10), transport: collector.transport, clock: ManualClock())
        let result = await uploader.flush()
        guard case .drained = result.outcome else { Issue.record("expected drained, got \(result)"); return }
        #expect(collector.transport.requests.map { trackIDs(in: $0) } == [Array(0..<10)], "one request, the whole batch")
        #expect(collector.transport.requests.first?.headers["X-Beacon-Retry"] == "5")
        #expect(dir.rejectedLines.isEmpty)
    }

    @Test("a bad event alone in its batch is isolated once more events are pending to prove the collector up")
    func loneBadEventWaitsForCompany() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<1, markerAt: [0])
        let collector = Collector { containsPoison($0) ? .status(500, body: clickHouseParseError) : nil }
        let clock = ManualClock()
        let uploader = try Uploader(log: log, configuration: testDelivery(batch: 10), transport: collector.transport, clock: clock)
        let alone = await advancing(clock) { await uploader.flush(timeout: .seconds(60)) }
        guard case .failed = alone.outcome else { Issue.record("expected failed, got \(alone)"); return }
        #expect(dir.rejectedLines.isEmpty, "one event failing alone could be an outage")
        for i in 1..<4 { try log.append(deliveryEvent(i)) }
        let result = await advancing(clock) { await uploader.flush(timeout: .seconds(60)) }
        guard case .drained = result.outcome else { Issue.record("expected drained, got \(result)"); return }
        #expect(collector.acceptedIDs == [1, 2, 3])
        #expect(dir.rejectedLines.count == 1)
    }

    @Test("flush(deadline: 60 s) against a collector failing for its first 5 s drains; so does shutdown", arguments: [false, true])
    func retriesUntilDeadline(shutdown: Bool) async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<25)
        let clock = ManualClock()
        let collector = Collector { _ in clock.now.offset < .seconds(5) ? .status(503) : nil }
        var config = testDelivery(batch: 10)
        config.isolateAfterFailures = 10
        let uploader = try Uploader(log: log, configuration: config, transport: collector.transport, clock: clock)
        let result = await advancing(clock) { shutdown ? await uploader.shutdown(timeout: .seconds(60)) : await uploader.flush(timeout: .seconds(60)) }
        guard case .drained = result.outcome else { Issue.record("expected drained, got \(result)"); return }
        #expect(result.sent == 25 && result.remaining == 0)
        #expect(collector.acceptedIDs == Array(0..<25))
        // Backoff 1 s, 2 s, 4 s (no jitter): attempts at 0, 1, 3 and 7 s.
        #expect(clock.now.offset == .seconds(7))
        #expect(collector.transport.requests.prefix(4).map { $0.headers["X-Beacon-Retry"] } == ["0", "1", "2", "3"])
    }

    @Test("a flush stops retrying when the next attempt could not start before its deadline, and starts no request after it")
    func retriesStopAtTheDeadline() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<5)
        let clock = ManualClock()
        let started = Mutex<[Duration]>([])
        let collector = Collector { _ in
            started.withLock { $0.append(clock.now.offset) }
            return .status(503, body: "overloaded")
        }
        let uploader = try Uploader(log: log, configuration: testDelivery(batch: 10), transport: collector.transport, clock: clock)
        let result = await advancing(clock) { await uploader.flush(timeout: .seconds(10)) }
        guard case .failed(let error) = result.outcome else { Issue.record("expected failed, got \(result)"); return }
        #expect((error as? DeliveryError)?.code == .transient)
        #expect("\(error)".contains("overloaded"), "the collector's answer is quoted: \(error)")
        // Backoff 1, 2, 4 s: passes at 0, 1, 3, 7 s (the last one isolating: several requests);
        // the next would start at 15 s, past the deadline.
        let starts = started.withLock { $0 }
        #expect(Set(starts) == Set([0, 1, 3, 7].map { Duration.seconds($0) }), "\(starts)")
        #expect(dir.rejectedLines.isEmpty && result.remaining == 5)
    }

    @Test("X-Beacon-Retry counts the attempts at a batch across a failed flush, a later flush and a restart")
    func retryHeaderAcrossFlushesAndRestarts() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        var log: BeaconLog? = try deliveryLog(dir, events: 0..<5)
        let failing = InMemoryTransport(replies: [.status(503), .failure(TransportError(.network, "connection refused"))])
        let first = try Uploader(log: log!, configuration: testDelivery(), transport: failing, clock: ManualClock())
        for _ in 0..<2 {
            let result = await first.flush()
            guard case .failed = result.outcome else { Issue.record("expected failed, got \(result)"); return }
        }
        try log!.close()
        log = nil
        let reopened = try BeaconLog(directory: dir.path)
        let transport = InMemoryTransport()
        let second = try Uploader(log: reopened, configuration: testDelivery(), transport: transport, clock: ManualClock())
        let result = await second.flush()
        #expect(result.sent == 5)
        let requests = failing.requests + transport.requests
        #expect(requests.map { $0.headers["X-Beacon-Retry"] } == ["0", "1", "2"])
        #expect(Set(requests.compactMap { $0.headers["Idempotency-Key"] }).count == 1)
        _ = first
    }

    @Test("a classifier reads answers the collector's way: 200 with an error body refuses, 503 pauses, 418 acknowledges")
    func classifier() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<10, markerAt: [6])
        let transport = InMemoryTransport()
        transport.setHandler { containsPoison($0) ? .status(200, body: #"{"error":"field item: bad value"}"#) : nil }
        var config = testDelivery(batch: 10)
        config.classifyAnswer = { status, _, body in
            status == 200 && String(decoding: body, as: UTF8.self).contains(#""error""#) ? .reject : nil
        }
        let uploader = try Uploader(log: log, configuration: config, transport: transport, clock: ManualClock())
        let result = await uploader.flush()
        guard case .drained = result.outcome else { Issue.record("expected drained, got \(result)"); return }
        let delivered: [Int] = transport.requests.filter { !containsPoison($0) }.flatMap { trackIDs(in: $0) }
        #expect(delivered == [0, 1, 2, 3, 4, 5, 7, 8, 9])
        #expect(dir.rejectedLines.count == 1 && dir.rejectedLines[0].contains("bad value") && dir.rejectedLines[0].contains(#""status":200"#))

        for i in 10..<12 { try log.append(deliveryEvent(i)) }
        transport.setHandler { _ in .status(503, headers: ["X-Maintenance": "1"]) }
        var pausing = config
        pausing.classifyAnswer = { status, headers, _ in headers["X-Maintenance"] != nil ? .pause : nil }
        let paused = try await Uploader(log: log, configuration: pausing, transport: transport, clock: ManualClock(), diagnostics: { _ in }).flush()
        guard case .failed(let error) = paused.outcome else { Issue.record("expected failed, got \(paused)"); return }
        #expect((error as? DeliveryError)?.code == .configuration)

        transport.setHandler { _ in .status(418) }
        var teapot = config
        teapot.classifyAnswer = { status, _, _ in status == 418 ? .acknowledge : nil }
        let accepted = try await Uploader(log: log, configuration: teapot, transport: transport, clock: ManualClock()).flush()
        #expect(accepted.sent == 2 && accepted.remaining == 0)
    }

    @Test("errors quote the collector's answer, on one line, cut to 512 bytes")
    func errorsQuoteTheAnswer() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<3)
        let long = "Code: 60. Table default.events doesn't exist.\n" + String(repeating: "é", count: 2000)
        let transport = InMemoryTransport(replies: [.status(500, body: long)])
        let uploader = try Uploader(log: log, configuration: testDelivery(), transport: transport, clock: ManualClock())
        let result = await uploader.flush()
        guard case .failed(let error) = result.outcome else { Issue.record("expected failed, got \(result)"); return }
        let message = (error as? DeliveryError)?.message ?? ""
        #expect(message.contains("answered 500: \"Code: 60. Table default.events doesn't exist."), "\(message)")
        #expect(!message.contains("\n"))
        #expect(message.contains("é…\""), "cut at a character boundary, marked")
        #expect(message.utf8.count < 512 + 200)
    }

    @Test("catch-up: big batches while more than one batch is pending, capped by maxBatchBytes; small ones in steady state")
    func catchUpBatches() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<250)
        let transport = InMemoryTransport()
        var config = testDelivery(batch: 10)
        config.catchUpBatchSize = 100
        let uploader = try Uploader(log: log, configuration: config, transport: transport, clock: ManualClock())
        #expect(await uploader.flush().sent == 250)
        #expect(transport.requests.map { trackIDs(in: $0).count } == [100, 100, 50])
        for i in 250..<255 { try log.append(deliveryEvent(i)) }
        #expect(await uploader.flush().sent == 5)
        for i in 255..<270 { try log.append(deliveryEvent(i)) }
        #expect(await uploader.flush().sent == 15)
        #expect(transport.requests.dropFirst(3).map { trackIDs(in: $0).count } == [5, 15])
        #expect(transport.requests.flatMap { trackIDs(in: $0) } == Array(0..<270))

        // The byte cap still holds while catching up.
        let capped = DeliveryTempDir()
        defer { capped.remove() }
        let cappedLog = try deliveryLog(capped, events: 0..<40)
        let eventBytes = deliveryEvent(0).count
        config.maxBatchBytes = eventBytes * 8  // the read stops once it holds at least this much
        let cappedTransport = InMemoryTransport()
        let cappedUploader = try Uploader(log: cappedLog, configuration: config, transport: cappedTransport, clock: ManualClock())
        #expect(await cappedUploader.flush().sent == 40)
        let sizes = cappedTransport.requests.map { trackIDs(in: $0).count }
        #expect(sizes.allSatisfy { $0 <= 8 }, "\(sizes)")
    }

    @Test("by default, while more than one batch is pending, a request carries up to maxBatchBytes of events; batchSize once caught up")
    func catchUpByBytesIsTheDefault() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<250)
        let transport = InMemoryTransport()
        var config = DeliveryConfiguration(url: URL(string: "http://127.0.0.1:9/events")!)
        config.batchSize = 10
        config.flushInterval = nil
        #expect(config.catchUpBatchSize == nil && config.maxBatchBytes == 1 << 20)
        let uploader = try Uploader(log: log, configuration: config, transport: transport, clock: ManualClock())
        #expect(await uploader.flush().sent == 250)
        #expect(transport.requests.map { trackIDs(in: $0).count } == [250], "one request for the backlog")
        for i in 250..<255 { try log.append(deliveryEvent(i)) }
        #expect(await uploader.flush().sent == 5)
        for i in 255..<265 { try log.append(deliveryEvent(i)) }
        #expect(await uploader.flush().sent == 10)
        for i in 265..<300 { try log.append(deliveryEvent(i)) }
        #expect(await uploader.flush().sent == 35)
        #expect(transport.requests.dropFirst().map { trackIDs(in: $0).count } == [5, 10, 35])
        #expect(transport.requests.flatMap { trackIDs(in: $0) } == Array(0..<300))

        // Every byte cap from one event to a dozen: each request stops at the first event that
        // reaches it, the events in order, once each.
        let eventBytes = deliveryEvent(0).count
        for cap in 1...12 {
            let capped = DeliveryTempDir()
            defer { capped.remove() }
            let cappedLog = try deliveryLog(capped, events: 0..<40)
            config.maxBatchBytes = eventBytes * cap
            let cappedTransport = InMemoryTransport()
            let cappedUploader = try Uploader(log: cappedLog, configuration: config, transport: cappedTransport, clock: ManualClock())
            #expect(await cappedUploader.flush().sent == 40)
            let sizes = cappedTransport.requests.map { trackIDs(in: $0).count }
            #expect(sizes.allSatisfy { $0 <= cap } && sizes.dropLast().allSatisfy { $0 == cap || $0 == 10 }, "cap \(cap): \(sizes)")
            #expect(cappedTransport.requests.flatMap { trackIDs(in: $0) } == Array(0..<40))
        }
    }

    @Test("catch-up batches keep deterministic idempotency keys: a re-sent batch has the same key and bytes")
    func catchUpKeysAreStable() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<120)
        let transport = InMemoryTransport(replies: [.status(503)])
        var config = testDelivery(batch: 10)
        config.catchUpBatchSize = 100
        let uploader = try Uploader(log: log, configuration: config, transport: transport, clock: ManualClock())
        _ = await uploader.flush()
        _ = await uploader.flush()
        let requests = transport.requests
        #expect(requests.count == 3)
        #expect(requests[0].headers["Idempotency-Key"] == requests[1].headers["Idempotency-Key"])
        #expect(requests[0].body == requests[1].body)
        #expect(trackIDs(in: requests[1]).count == 100 && trackIDs(in: requests[2]).count == 20)
    }
}
