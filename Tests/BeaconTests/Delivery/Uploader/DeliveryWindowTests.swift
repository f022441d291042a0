import Foundation
import Synchronization
import Testing
@testable import Beacon
import BeaconLog
import BeaconTesting
import BeaconTestSupport

/// The uploader's window of requests in flight (Uploader+Window.swift) against real sockets:
/// the log's order with no failure, the failure rules, the fallback for a collector that does
/// not take pipelined requests.
@Suite("Delivery: a window of pipelined requests in flight", .serialized, .timeLimit(.minutes(1)))
struct DeliveryWindowTests {
    static func config(_ url: URL, batch: Int = 10, window: Int = 8) -> DeliveryConfiguration {
        var config = testDelivery(url, batch: batch)
        config.maxRequestsInFlight = window
        return config
    }

    /// The `_track_id`s of the events a request carried, in order.
    static func ids(_ request: LoopbackCollector.Request) -> [Int] { trackIDs(request.events ?? []) }
    static func ids(body: [UInt8]) -> [Int] { trackIDs(BatchSplitter.events(in: body) ?? []) }

    @Test("a backlog with no failure: every event once, in the log's order, with the window grown beyond one request")
    func inOrderWithoutFailure() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<2_000)
        let collector = try LoopbackCollector()
        defer { collector.stop() }
        let diagnostics = DiagnosticsSink()
        let uploader = try Uploader(log: log, configuration: Self.config(collector.url), diagnostics: { diagnostics.handler($0.message) })
        let result = await uploader.flush()
        #expect(result.outcome.isComplete && result.sent == 2_000, "\(result)")
        let ids = collector.requests.flatMap { Self.ids($0) }
        #expect(ids == Array(0..<2_000), "once each, in order")
        #expect(collector.requests.count == 200)
        let stats = uploader.stats
        #expect(stats.requestWindow > 1, "the window grew: \(stats.requestWindow)")
        #expect(stats.requestsInFlight == 0 && stats.sentRequests == 200)
        #expect(!diagnostics.all.contains { $0.contains("pipelined") }, "\(diagnostics.all)")
        let metrics = uploader.metrics
        #expect(metrics.prometheusText().contains("beacon_request_window \(stats.requestWindow)"))
    }

    @Test("a retryable answer inside the window: nothing more is written, the requests behind it that were accepted are not sent again, the failed batch goes first when retried", arguments: [503, 429, 500])
    func failureInTheWindow(status: Int) async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<600)
        let collector = try LoopbackCollector()
        defer { collector.stop() }
        // Twenty answers go through (the window grows), then one failure.
        for _ in 0..<20 { collector.enqueue(.status(200)) }
        collector.enqueue(.status(status, body: "busy"))
        var config = Self.config(collector.url)
        config.backoff = .init(initial: .milliseconds(1), maximum: .milliseconds(1), jitter: false)
        let uploader = try Uploader(log: log, configuration: config, clock: ContinuousClock())
        var sent = 0
        for _ in 0..<20 where sent < 600 {
            sent += await uploader.flush().sent
        }
        #expect(sent == 600)
        let accepted = collector.requests.filter { $0.status == 200 }.map { Self.ids($0) }
        #expect(accepted.flatMap { $0 }.sorted() == Array(0..<600), "each event accepted once")
        let failed = try #require(collector.requests.first { $0.status == status })
        let failedIDs = Self.ids(failed)
        // The failed request's events arrive after those of at most W - 1 requests behind it.
        let firstFailedAt = collector.requests.firstIndex { $0.status == status }!
        let again = collector.requests.firstIndex { $0.status == 200 && Self.ids($0) == failedIDs }!
        let overtaking = collector.requests[(firstFailedAt + 1)..<again].filter { $0.status == 200 }
        #expect(overtaking.count <= config.maxRequestsInFlight - 1, "\(overtaking.count) requests overtook the failed one")
        #expect(overtaking.allSatisfy { (Self.ids($0).first ?? 0) > failedIDs.last! }, "only requests sent behind it")
        // Nothing sent twice but the failed batch.
        let bodies = collector.requests.map { Self.ids($0) }
        #expect(bodies.count - Set(bodies).count == 1, "\(bodies.count) requests, \(Set(bodies).count) distinct")
    }

    @Test("413 and 400 inside the window are handled one request at a time: split, the refused event set aside, the rest delivered once")
    func splitAndBisectAfterWindow() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<300, markerAt: [205])
        let collector = try LoopbackCollector()
        defer { collector.stop() }
        for _ in 0..<12 { collector.enqueue(.status(200)) }
        collector.enqueue(.status(413))
        // The event 205 is refused wherever it goes (400 for a batch holding it).
        collector.rejectMarker = "POISON"
        let uploader = try Uploader(log: log, configuration: Self.config(collector.url))
        var sent = 0
        for _ in 0..<10 where sent < 299 { sent += await uploader.flush().sent }
        #expect(sent == 299)
        let accepted = collector.requests.filter { $0.status == 200 }.flatMap { Self.ids($0) }
        #expect(accepted.sorted() == Array(0..<300).filter { $0 != 205 }, "each once, 205 set aside")
        #expect(Set(accepted).count == accepted.count)
        #expect(uploader.stats.rejectedEvents == 1)
    }

    @Test("a collector that answers Connection: close with requests behind: one request at a time from then on, reported once; the requests it did not answer go again as they were cut")
    func fallbackForConnectionClose() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<300)
        let received = Mutex<[[Int]]>([])
        let server = try ScriptedServer { connection, _ in
            // HTTP/1.0 style: one answer per connection, whatever was written behind it.
            guard let (_, body) = connection.readRequest() else { return }
            let ids = Self.ids(body: body)
            received.withLock { $0.append(ids) }
            connection.answer(200, "ok", headers: "Connection: close\r\n")
            connection.close()
        }
        defer { server.stop() }
        let diagnostics = DiagnosticsSink()
        let url = URL(string: "http://127.0.0.1:\(server.port)/events")!
        let uploader = try Uploader(log: log, configuration: Self.config(url), transport: SocketTransport(), diagnostics: { diagnostics.handler($0.message) })
        var sent = 0
        for _ in 0..<10 where sent < 300 { sent += await uploader.flush().sent }
        #expect(sent == 300)
        // The server closes with the pipelined requests unread, so its kernel may answer them with a
        // reset, and a reset can discard the 200 before the client reads it (RFC 9112 §9.6: the
        // reason servers linger when closing). That request then goes again, whole: at least once.
        let requests = received.withLock { $0 }
        var seen = Set<Int>(), firstArrivals: [Int] = []
        for request in requests {
            let fresh = request.filter { !seen.contains($0) }
            #expect(fresh.isEmpty || fresh == request, "a request is new or a whole batch again: \(request)")
            firstArrivals += fresh
            seen.formUnion(request)
        }
        #expect(firstArrivals == Array(0..<300), "every event, first arrivals in order")
        #expect(uploader.stats.requestWindow == 1)
        #expect(diagnostics.all.filter { $0.contains("does not take pipelined requests") }.count <= 1, "\(diagnostics.all)")
    }

    @Test("a server closing after k answers with requests unanswered, for every k below the window: the rest go again, every event once, in order", arguments: 1...4)
    func closesAfterK(k: Int) async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<200)
        let received = Mutex<[[Int]]>([])
        let server = try ScriptedServer { connection, _ in
            // Reads what comes, answers k requests, then closes.
            for _ in 0..<k {
                guard let (_, body) = connection.readRequest() else { return }
                let ids = Self.ids(body: body)
                received.withLock { $0.append(ids) }
                connection.answer(200, "ok")
            }
            connection.close()
        }
        defer { server.stop() }
        let url = URL(string: "http://127.0.0.1:\(server.port)/events")!
        let uploader = try Uploader(log: log, configuration: Self.config(url), transport: SocketTransport())
        var sent = 0
        for _ in 0..<60 where sent < 200 { sent += await uploader.flush().sent }
        #expect(sent == 200)
        // A close with requests unread sends a reset, which may discard an answer the client had
        // not read yet: that batch goes again (at least once), whole.
        var seen = Set<Int>(), firsts: [Int] = []
        for batch in received.withLock({ $0 }) {
            #expect(batch.allSatisfy { seen.contains($0) } || batch.allSatisfy { !seen.contains($0) }, "whole batches again")
            for id in batch where seen.insert(id).inserted { firsts.append(id) }
        }
        #expect(firsts == Array(0..<200), "every event, first arrivals in order")
    }
}
