import Foundation
import Testing
@testable import Beacon
import BeaconLog
import BeaconTesting
import BeaconTestSupport

@Suite("Delivery: uploader with an in-memory transport and a manual clock", .timeLimit(.minutes(1)))
struct DeliveryUploaderTests {
    @Test("flush reports noData, then drained; events go in order in batches with all headers")
    func flushDrains() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir)
        let transport = InMemoryTransport()
        var config = testDelivery(batch: 10)
        config.headers = ["Authorization": "Bearer secret"]
        let uploader = try Uploader(log: log, configuration: config, transport: transport, clock: ManualClock(), now: { Date(timeIntervalSince1970: 1_800_000_000) })
        let empty = await uploader.flush()
        guard case .noData = empty.outcome else { Issue.record("expected noData, got \(empty)"); return }
        for i in 0..<25 { try log.append(deliveryEvent(i)) }
        let result = await uploader.flush()
        guard case .drained = result.outcome else { Issue.record("expected drained, got \(result)"); return }
        #expect(result.sent == 25 && result.remaining == 0)
        let requests = transport.requests
        #expect(requests.map { trackIDs(in: $0).count } == [10, 10, 5])
        #expect(requests.flatMap { trackIDs(in: $0) } == Array(0..<25))
        for request in requests {
            #expect(request.headers["Content-Type"] == "application/json")
            #expect(request.headers["User-Agent"] == "beacon-swift/\(Uploader.version)")
            #expect(request.headers["X-Beacon-Sent-At"] == "1800000000000")
            #expect(request.headers["X-Beacon-Retry"] == "0")
            #expect(request.headers["Authorization"] == "Bearer secret")
            #expect(request.headers["Idempotency-Key"]?.isEmpty == false)
            #expect(request.method == "POST")
        }
        #expect(Set(requests.compactMap { $0.headers["Idempotency-Key"] }).count == 3)
        let stats = uploader.stats
        #expect(stats.sentEvents == 25 && stats.sentRequests == 3 && stats.pendingEvents == 0)
        #expect(log.checkpoint.seq == 25)
    }

    @Test("backoff: 1 s, 2 s, 4 s on the monotonic clock, same key and rising X-Beacon-Retry, then delivered")
    func backoffTiming() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<5)
        let network = TransportError(.network, "connection refused")
        let transport = InMemoryTransport(replies: [.failure(network), .status(503), .status(500)])
        let clock = ManualClock()
        var config = testDelivery()
        config.isolateAfterFailures = 4  // the whole batch every time: this test is about the backoff, not isolation
        let uploader = try Uploader(log: log, configuration: config, transport: transport, clock: clock)
        uploader.start()
        var expectedDeadline: Duration = .zero
        for (attempt, wait) in [Duration.seconds(1), .seconds(2), .seconds(4)].enumerated() {
            await transport.waitForRequests(count: attempt + 1)
            await clock.waitForSleepers(count: 1)
            expectedDeadline += wait
            #expect(clock.nextDeadline?.offset == expectedDeadline, "attempt \(attempt + 1)")
            clock.advance(by: wait - .milliseconds(1))
            #expect(transport.requests.count == attempt + 1, "no attempt before the backoff ends")
            clock.advance(by: .milliseconds(1))
        }
        await transport.waitForRequests(count: 4)
        #expect(await eventually { uploader.stats.sentEvents == 5 })
        let requests = transport.requests
        #expect(Set(requests.compactMap { $0.headers["Idempotency-Key"] }).count == 1)
        #expect(requests.map { $0.headers["X-Beacon-Retry"] } == ["0", "1", "2", "3"])
        #expect(requests.map(\.body) == Array(repeating: requests[0].body, count: 4), "the same bytes every attempt")
        let stats = uploader.stats
        #expect(stats.consecutiveFailures == 0); #expect(stats.failedRequests == 3); #expect(stats.retries == 3); #expect(stats.sentEvents == 5)
        _ = await uploader.shutdown()
    }

    @Test("full jitter: each wait lies between zero and its cap")
    func jitterBounds() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<3)
        let transport = InMemoryTransport()
        transport.defaultReply = .status(503)
        let clock = ManualClock()
        var config = testDelivery()
        config.backoff = .init(initial: .seconds(1), maximum: .seconds(4), jitter: true)
        let uploader = try Uploader(log: log, configuration: config, transport: transport, clock: clock)
        uploader.start()
        for attempt in 1...6 {
            await transport.waitForRequests(count: attempt)
            await clock.waitForSleepers(count: 1)
            let wait = clock.now.duration(to: clock.nextDeadline!)
            #expect(wait >= .zero && wait <= config.backoff.cap(afterFailures: attempt), "attempt \(attempt): \(wait)")
            clock.advanceToNextDeadline()
        }
        _ = await uploader.shutdown(timeout: .zero)
    }

    @Test("Retry-After in seconds and as an HTTP date replaces the backoff", arguments: [(429, "30", 30), (503, "Fri, 15 Jan 2027 08:00:20 GMT", 20), (429, "0", 0)])
    func retryAfter(status: Int, header: String, seconds: Int) async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<3)
        let transport = InMemoryTransport(replies: [.status(status, headers: ["Retry-After": header])])
        let clock = ManualClock()
        let now = Date(timeIntervalSince1970: 1_799_999_988 + 12)  // 2027-01-15 08:00:00 UTC
        let uploader = try Uploader(log: log, configuration: testDelivery(), transport: transport, clock: clock, now: { now })
        uploader.start()
        await transport.waitForRequests(count: 1)
        if seconds > 0 {
            await clock.waitForSleepers(count: 1)
            #expect(clock.nextDeadline?.offset == .seconds(seconds))
            // A manual flush before Retry-After ends, with a shorter deadline, fails at once without a request.
            let early = await uploader.flush(timeout: .seconds(seconds / 2))
            guard case .failed = early.outcome else { Issue.record("expected failed, got \(early)"); return }
            #expect(transport.requests.count == 1)
            clock.advance(by: .seconds(seconds))
        }
        await transport.waitForRequests(count: 2)
        #expect(await eventually { uploader.stats.pendingEvents == 0 })
        _ = await uploader.shutdown()
    }

    @Test("401, 403, 404, 501 and other 4xx pause and report loudly; nothing is dropped or rejected", arguments: [401, 403, 404, 405, 409, 418, 501, 505])
    func configurationProblemsPause(status: Int) async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<12)
        let transport = InMemoryTransport(replies: [.status(status), .status(status)])
        let sink = DiagnosticsSink()
        let clock = ManualClock()
        var config = testDelivery(batch: 5)
        config.headers = ["Authorization": "Bearer top-secret"]
        let uploader = try Uploader(log: log, configuration: config, transport: transport, clock: clock, diagnostics: { sink.handler($0.message) })
        let result = await uploader.flush()
        guard case .failed(let error) = result.outcome else { Issue.record("expected failed, got \(result)"); return }
        #expect((error as? DeliveryError)?.code == .configuration)
        #expect((error as? DeliveryError)?.status == status)
        #expect(result.sent == 0 && result.remaining == 12)
        let stats = uploader.stats
        #expect(stats.paused == "HTTP \(status)")
        #expect(sink.all.count == 1 && sink.all[0].contains("\(status)"))
        #expect(!sink.all.joined().contains("top-secret"), "headers are never logged")
        #expect(dir.rejectedLines.isEmpty)
        // The pause retries with backoff; once the collector is fixed everything goes, in order.
        uploader.start()
        await clock.waitForSleepers(count: 1)
        clock.advanceToNextDeadline()
        await transport.waitForRequests(count: 2)
        await clock.waitForSleepers(count: 1)
        clock.advanceToNextDeadline()
        #expect(await eventually { let s = uploader.stats; return s.sentEvents == 12 && s.paused == nil })
        #expect(transport.requests.dropFirst(2).flatMap { trackIDs(in: $0) } == Array(0..<12))
        #expect(uploader.stats.paused == nil)
        #expect(sink.all.last?.contains("resumed") == true)
        _ = await uploader.shutdown()
    }

    @Test("400 bisects to the refused event at every position; the rest goes, in order", arguments: 0..<10)
    func bisectEveryPosition(poison: Int) async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<10, markerAt: [poison])
        let transport = InMemoryTransport()
        transport.setHandler { request in
            String(decoding: request.body, as: UTF8.self).contains("POISON") ? .status(422, body: "field item is poisoned") : nil
        }
        let uploader = try Uploader(log: log, configuration: testDelivery(batch: 10), transport: transport, clock: ManualClock())
        let result = await uploader.flush()
        guard case .drained = result.outcome else { Issue.record("expected drained, got \(result)"); return }
        let accepted = transport.requests.filter { !String(decoding: $0.body, as: UTF8.self).contains("POISON") }
        #expect(accepted.flatMap { trackIDs(in: $0) } == Array(0..<10).filter { $0 != poison })
        let rejected = dir.rejectedLines
        #expect(rejected.count == 1)
        #expect(rejected.first?.contains(#""status":422"#) == true)
        #expect(rejected.first?.contains("field item is poisoned") == true)
        #expect(rejected.first.flatMap { trackID(Array($0.utf8)) } == nil)
        let line = try #require(rejected.first)
        let object = try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
        #expect((object["record"] as? [String: Any])?["_track_id"] as? Int == poison)
        #expect(result.sent == 9 && result.remaining == 0)
        #expect(uploader.stats.rejectedEvents == 1)
    }

    @Test("400 with two refused events anywhere sets both aside", arguments: [(0, 9), (3, 4), (1, 8), (5, 6)])
    func bisectTwo(a: Int, b: Int) async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<10, markerAt: [a, b])
        let transport = InMemoryTransport()
        transport.setHandler { String(decoding: $0.body, as: UTF8.self).contains("POISON") ? .status(400) : nil }
        let uploader = try Uploader(log: log, configuration: testDelivery(batch: 10), transport: transport, clock: ManualClock())
        let result = await uploader.flush()
        #expect(result.sent == 8)
        let accepted = transport.requests.filter { !String(decoding: $0.body, as: UTF8.self).contains("POISON") }
        #expect(accepted.flatMap { trackIDs(in: $0) } == Array(0..<10).filter { $0 != a && $0 != b })
        #expect(dir.rejectedLines.count == 2)
    }

    @Test("413 splits until requests fit; a single event still too large is set aside", arguments: [1, 2, 3, 7, 50])
    func splitOn413(fitting: Int) async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<20)
        let huge = Array(#"{"time":1,"_track_id":999,"blob":""#.utf8) + Array(repeating: UInt8(ascii: "x"), count: 20_000) + Array(#""}"#.utf8)
        try log.append(huge)
        for i in 20..<25 { try log.append(deliveryEvent(i)) }
        let limit = fitting * 210 + 2
        let transport = InMemoryTransport()
        transport.setHandler { $0.body.count > limit ? .status(413) : nil }
        let uploader = try Uploader(log: log, configuration: testDelivery(batch: 50), transport: transport, clock: ManualClock())
        let result = await uploader.flush()
        guard case .drained = result.outcome else { Issue.record("expected drained, got \(result)"); return }
        let accepted = transport.requests.filter { $0.body.count <= limit }
        #expect(accepted.flatMap { trackIDs(in: $0) } == Array(0..<25))
        #expect(accepted.allSatisfy { trackIDs(in: $0).count <= fitting })
        let rejected = dir.rejectedLines
        #expect(rejected.count == 1 && rejected[0].contains(#""status":413"#) && rejected[0].contains("999"))
        #expect(uploader.stats.splits > 0)
    }

    @Test("the count trigger flushes at flushBulkSize pending events, not before")
    func countTrigger() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir)
        let transport = InMemoryTransport()
        var config = testDelivery(batch: 50)
        config.flushBulkSize = 100
        let uploader = try Uploader(log: log, configuration: config, transport: transport, clock: ManualClock())
        uploader.start()
        // The loop's first pass (for events left by earlier runs) ends before the appends: a pass
        // ending between an append and its recordsAppended() counts that event twice, which only
        // brings a pass forward by one event, but this test counts exactly.
        #expect(await eventually(60) { uploader.scheduling.withLock { $0.machine.loop.id != 0 && $0.machine.state == .idle && !$0.machine.trigger.due } })
        for i in 0..<99 {
            try log.append(deliveryEvent(i))
            uploader.recordsAppended()
        }
        #expect(uploader.scheduling.withLock { ($0.machine.trigger.unsent, $0.machine.trigger.armed) } == (99, false))
        try log.append(deliveryEvent(99))
        uploader.recordsAppended()
        await transport.waitForRequests(count: 2)
        #expect(await eventually { uploader.stats.pendingEvents == 0 })
        #expect(transport.requests.flatMap { trackIDs(in: $0) } == Array(0..<100))
        #expect(await eventually { uploader.scheduling.withLock { $0.machine.trigger.unsent == 0 && !$0.machine.trigger.armed } })
        _ = await uploader.shutdown()
    }

    @Test("the interval timer flushes every flushInterval (raised to 5 s), and not while nothing is due")
    func intervalTrigger() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir)
        let transport = InMemoryTransport()
        let clock = ManualClock()
        var config = testDelivery()
        config.flushInterval = .seconds(1)
        let uploader = try Uploader(log: log, configuration: config, transport: transport, clock: clock)
        uploader.start()
        await clock.waitForSleepers(count: 1)
        #expect(clock.nextDeadline?.offset == .seconds(5))
        for i in 0..<3 { try log.append(deliveryEvent(i)) }
        try log.sync()
        clock.advance(by: .seconds(4))
        #expect(transport.requests.isEmpty)
        clock.advance(by: .seconds(1))
        await transport.waitForRequests(count: 1)
        #expect(trackIDs(in: transport.requests[0]) == [0, 1, 2])
        await clock.waitForSleepers(count: 1)
        #expect(clock.nextDeadline?.offset == .seconds(10))
        _ = await uploader.shutdown()
        #expect(clock.sleeperCount == 0, "shutdown stops the timer")
    }

    @Test("concurrent flushes share one flush and get the same result")
    func concurrentFlushesShare() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<7)
        let transport = InMemoryTransport()
        transport.hold()
        let uploader = try Uploader(log: log, configuration: testDelivery(), transport: transport, clock: ManualClock())
        let first = Task { await uploader.flush() }
        await transport.waitForRequests(count: 1)
        let others = (0..<3).map { _ in Task { await uploader.flush() } }
        #expect(await eventually { await uploader.sharedFlushJoins == 3 })
        transport.release()
        let results = [await first.value] + (await withTaskGroup(of: FlushResult.self) { group in
            for task in others { group.addTask { await task.value } }
            var all: [FlushResult] = []
            for await result in group { all.append(result) }
            return all
        })
        #expect(results.allSatisfy { $0.sent == 7 && $0.remaining == 0 })
        #expect(transport.requests.count == 1)
    }

    @Test("the idempotency key and body stay the same across a restart, even after more events arrive")
    func keyStableAcrossRestart() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        var log: BeaconLog? = try deliveryLog(dir, events: 0..<30)
        let failing = InMemoryTransport(replies: [.failure(TransportError(.timeout, "no answer"))])
        let first = try Uploader(log: log!, configuration: testDelivery(batch: 50), transport: failing, clock: ManualClock())
        let result = await first.flush()
        guard case .failed = result.outcome else { Issue.record("expected failed, got \(result)"); return }
        let sent = try #require(failing.requests.first)
        #expect(trackIDs(in: sent) == Array(0..<30))
        // The process dies; the log is reopened and more events arrive before the uploader restarts.
        try log!.close()
        log = nil
        let reopened = try BeaconLog(directory: dir.path)
        for i in 30..<45 { try reopened.append(deliveryEvent(i)) }
        let transport = InMemoryTransport()
        let second = try Uploader(log: reopened, configuration: testDelivery(batch: 50), transport: transport, clock: ManualClock())
        let drained = await second.flush()
        #expect(drained.sent == 45)
        let requests = transport.requests
        #expect(requests.count == 2)
        #expect(requests[0].headers["Idempotency-Key"] == sent.headers["Idempotency-Key"])
        #expect(requests[0].body == sent.body)
        #expect(requests[0].headers["X-Beacon-Retry"] == "1")
        #expect(trackIDs(in: requests[1]) == Array(30..<45))
        _ = first
    }

    @Test("events older than maxEventAge are set aside as expired, counted, and the rest is sent")
    func expiry() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let now = Date(timeIntervalSince1970: 1_700_000_000 + 7200)
        let log = try deliveryLog(dir)
        for i in 0..<4 { try log.append(deliveryEvent(i)) }  // time ≈ 1_700_000_000_000: two hours old
        for i in 4..<10 { try log.append(deliveryEvent(i, timeBase: 1_700_000_000_000 + 7_000_000)) }
        let transport = InMemoryTransport()
        var config = testDelivery(batch: 3)
        config.maxEventAge = .seconds(3600)
        let uploader = try Uploader(log: log, configuration: config, transport: transport, clock: ManualClock(), now: { now })
        let result = await uploader.flush()
        guard case .drained = result.outcome else { Issue.record("expected drained, got \(result)"); return }
        #expect(transport.requests.flatMap { trackIDs(in: $0) } == Array(4..<10))
        let lines = dir.rejectedLines
        #expect(lines.count == 4 && lines.allSatisfy { $0.contains(#""reason":"expired""#) })
        #expect(uploader.stats.expiredEvents == 4)
        #expect(log.stats.pendingRecords == 0)
    }

    @Test("shutdown cancels a request that does not answer by the deadline; the events stay pending")
    func shutdownDeadlineInMemory() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<5)
        let transport = InMemoryTransport(replies: [.hang])
        let uploader = try Uploader(log: log, configuration: testDelivery(), transport: transport)
        uploader.start()
        await transport.waitForRequests(count: 1)
        let clock = ContinuousClock()
        let began = clock.now
        let report = await uploader.shutdown(timeout: .milliseconds(200))
        let elapsed = began.duration(to: clock.now)
        guard case .deadlineReached = report.outcome else { Issue.record("expected deadlineReached, got \(report)"); return }
        #expect(report.remaining == 5)
        #expect(elapsed < .seconds(40), "\(elapsed): below the request timeout (60 s), allowing for a loaded 2-core machine, which stalled these 13 s")
        #expect(log.checkpoint.seq == 0)
        let after = await uploader.flush()
        guard case .failed = after.outcome else { Issue.record("a flush after shutdown fails, got \(after)"); return }
    }

    @Test("clock skew comes from the collector's Date header against the request's midpoint")
    func clockSkew() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<2)
        let ahead = LoopbackCollector.httpDate(Date(timeIntervalSince1970: 1_800_000_090))
        let transport = InMemoryTransport(replies: [.status(200, headers: ["Date": ahead])])
        let uploader = try Uploader(log: log, configuration: testDelivery(), transport: transport, clock: ManualClock(), now: { Date(timeIntervalSince1970: 1_800_000_000) })
        _ = await uploader.flush()
        #expect(uploader.stats.clockSkew == .milliseconds(90_500))
    }
}
