import Foundation
import Testing
@testable import Beacon
import BeaconLog
import BeaconTestSupport

/// The tracker delivering to a real lighttpd (Debian's package, started on 127.0.0.1 with a
/// private configuration): a CGI collector behind lighttpd's own framing and limits, which close
/// connections after a number of requests (`Connection: close` on the last answer) or an idle
/// second, and answer 413 from the head alone.
@Suite("lighttpd: a real server's limits", .serialized, .enabled(if: LighttpdServer.isAvailable, Comment(rawValue: LighttpdServer.skipReason)), .timeLimit(.minutes(1)))
struct LighttpdTests {
    static func configuration(_ dir: DeliveryTempDir, _ server: LighttpdServer, batchSize: Int = 10) -> Beacon.Configuration {
        var config = Beacon.Configuration(directory: dir.path, serverURL: server.url)
        config.lifecycleEvents = false
        config.diagnostics = { _ in }
        var delivery = DeliveryConfiguration(url: server.url)
        delivery.flushInterval = nil
        delivery.batchSize = batchSize
        delivery.catchUpBatchSize = batchSize  // the suite counts requests of batchSize events
        delivery.format = .ndjson
        delivery.backoff = .init(initial: .milliseconds(20), maximum: .milliseconds(100))
        config.delivery = delivery
        return config
    }

    /// The `n` of every event lighttpd's collector received, in order.
    static func received(_ server: LighttpdServer) -> [Int] {
        server.bodies.split(separator: UInt8(ascii: "\n")).compactMap { numberedN($0) }
    }

    @Test("every event once, in order, while lighttpd closes the connection after every 3 requests")
    func keepAliveRequestLimit() async throws {
        var limits = LighttpdServer.Limits()
        limits.keepAliveRequests = 3
        let server = try LighttpdServer(limits)
        defer { server.stop() }
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let beacon = try Beacon(configuration: Self.configuration(dir, server))
        for n in 0..<95 { beacon.track("Numbered", properties: ["n": .int(n)]) }
        let result = await beacon.flush(timeout: .seconds(30))
        // The delivery loop's pass, which starts with the first commit, may send some of the
        // events before the flush (in requests of fewer than 10 where it caught up with the
        // writer): those are not the flush's.
        #expect(result.outcome.isComplete && result.sent <= 95 && result.remaining == 0, "\(result)")
        #expect(Self.received(server) == Array(0..<95), "once each, in order")
        #expect(server.keys.count >= 10 && Set(server.keys).count == server.keys.count, "10 requests (10, 10, … 5 events) or more, each with its own key; none sent twice: \(server.keys)")
        let stats = try #require(beacon.delivery.uploader).stats
        // Requests pipelined behind the 3rd answer went unanswered (lighttpd closes): sent again once,
        // and from then on one request at a time for this server.
        #expect(stats.failedRequests == 0 && stats.retries <= 8, "a connection lighttpd closed after its 3rd answer is never reused: \(stats)")
        await beacon.close()
    }

    @Test("an idle connection lighttpd closed after 1 s: the next flush reconnects, with no error and nothing sent twice")
    func idleKeepAliveClosed() async throws {
        var limits = LighttpdServer.Limits()
        limits.keepAliveIdleSeconds = 1
        let server = try LighttpdServer(limits)
        defer { server.stop() }
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let beacon = try Beacon(configuration: Self.configuration(dir, server))
        for round in 0..<3 {
            for n in (round * 10)..<(round * 10 + 10) { beacon.track("Numbered", properties: ["n": .int(n)]) }
            let result = await beacon.flush(timeout: .seconds(60))
            // All 10 sent by the flush, or some by the delivery loop's pass before it (below).
            #expect(result.outcome.isComplete && result.sent <= 10 && result.remaining == 0, "round \(round): \(result)")
            if round < 2 { try await Task.sleep(for: .milliseconds(2500)) }  // lighttpd closes the idle connection meanwhile
        }
        #expect(Self.received(server) == Array(0..<30))
        // Usually one request per flush; the delivery loop's first pass, which starts with the
        // first commit, may take the first round's first events in a request (or more, where it
        // caught up with the writer) of its own.
        #expect(server.keys.count >= 3 && Set(server.keys).count == server.keys.count, "none repeated: \(server.keys)")
        let stats = try #require(beacon.delivery.uploader).stats
        #expect(stats.failedRequests == 0, "a connection the server closed while idle is not an error: \(stats)")
        await beacon.close()
    }

    @Test("a body over lighttpd's max-request-size gets 413: the batch is split until the one large event is set aside; every other event is delivered in order")
    func requestTooLarge() async throws {
        var limits = LighttpdServer.Limits()
        limits.maxRequestKiB = 4
        let server = try LighttpdServer(limits)
        defer { server.stop() }
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let beacon = try Beacon(configuration: Self.configuration(dir, server, batchSize: 8))
        let large = String(repeating: "x", count: 6000)
        for n in 0..<24 {
            beacon.track("Numbered", properties: n == 13 ? ["n": .int(n), "blob": .string(large)] : ["n": .int(n)])
        }
        let result = await beacon.flush(timeout: .seconds(30))
        #expect(result.remaining == 0, "\(result)")
        #expect(Self.received(server) == Array(0..<24).filter { $0 != 13 }, "every other event, once, in order")
        let stats = try #require(beacon.delivery.uploader).stats
        #expect(stats.rejectedEvents == 1 && stats.splits >= 3, "8 → 4 → 2 → 1, then the event alone is set aside: \(stats)")
        #expect(Set(server.keys).count == server.keys.count, "no batch answered 200 was sent again: \(server.keys)")
        await beacon.close()
    }
}
