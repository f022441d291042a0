import BeaconLog
import BeaconTesting
import BeaconTestSupport
import FaultInjection
import Foundation
import Glibc
import Synchronization
import Testing
@testable import Beacon

/// The ``DeliveryError`` a user sees, in a flush's `.failed` outcome and in the diagnostic that
/// reports it, for every failure the uploader reports: its code, the collector's status, the
/// start of its answer, and the cause (the transport's error when no answer came, the storage
/// error). Credentials never reach the answer, the message or the cause.
@Suite("Delivery errors: status, answer excerpt and cause", .timeLimit(.minutes(1)))
struct DeliveryErrorCauseTests {
    /// Every diagnostic, whole.
    final class Diagnostics: Sendable {
        let all = Mutex<[BeaconDiagnostic]>([])
        var handler: @Sendable (BeaconDiagnostic) -> Void { { [self] d in all.withLock { $0.append(d) } } }
        var errors: [DeliveryError] { all.withLock { $0.compactMap(\.deliveryError) } }
    }

    /// What the collector (or the transport) does, and the error the user must see.
    struct Case: Sendable, CustomTestStringConvertible {
        var reply: InMemoryTransport.Reply
        var code: DeliveryError.Code
        var status: Int?
        var answer: String?
        var causeKind: TransportError.Code?
        /// Whether a diagnostic reports it (a pause does; a retried failure does not).
        var reported: Bool
        var testDescription: String

        static let all: [Case] = [
            Case(reply: .status(503, body: "overloaded:\ntry later"), code: .transient, status: 503, answer: "overloaded: try later", reported: false, testDescription: "503"),
            Case(reply: .status(429, headers: ["Retry-After": "1"], body: "slow down"), code: .transient, status: 429, answer: "slow down", reported: false, testDescription: "429"),
            Case(reply: .status(500), code: .transient, status: 500, answer: "", reported: false, testDescription: "500, empty body"),
            Case(reply: .status(401, body: "{\"error\":\"bad token\"}"), code: .configuration, status: 401, answer: "{\"error\":\"bad token\"}", reported: true, testDescription: "401"),
            Case(reply: .status(403, body: "forbidden"), code: .configuration, status: 403, answer: "forbidden", reported: true, testDescription: "403"),
            Case(reply: .status(404, body: "no such table"), code: .configuration, status: 404, answer: "no such table", reported: true, testDescription: "404"),
            Case(reply: .failure(TransportError(.timeout, "no answer from 127.0.0.1:9 within 5s")), code: .transient, causeKind: .timeout, reported: false, testDescription: "timeout"),
            Case(reply: .failure(TransportError(.network, "connect to 127.0.0.1:9: connection refused")), code: .transient, causeKind: .network, reported: false, testDescription: "refused"),
            Case(reply: .failure(TransportError(.tls, "certificate verify failed for localhost")), code: .configuration, causeKind: .tls, reported: true, testDescription: "TLS"),
        ]
    }

    func check(_ error: DeliveryError, _ c: Case, sourceLocation: SourceLocation = #_sourceLocation) {
        #expect(error.code == c.code, "\(error)", sourceLocation: sourceLocation)
        #expect(error.status == c.status, "\(error)", sourceLocation: sourceLocation)
        #expect(error.answer == c.answer, "\(error)", sourceLocation: sourceLocation)
        if let kind = c.causeKind {
            let cause = error.cause as? TransportError
            #expect(cause?.code == kind, "cause: \(String(describing: error.cause))", sourceLocation: sourceLocation)
            #expect(!(cause?.message ?? "").isEmpty && error.message.contains(cause?.message ?? "\u{0}"), "the message says what the transport said: \(error.message)", sourceLocation: sourceLocation)
        } else {
            #expect(error.cause == nil, "the collector answered: no cause, got \(String(describing: error.cause))", sourceLocation: sourceLocation)
        }
    }

    @Test("a flush's failure and its diagnostic carry code, status, answer and cause", arguments: Case.all)
    func uploaderFailure(_ c: Case) async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<3)
        let transport = InMemoryTransport()
        transport.defaultReply = c.reply
        let diagnostics = Diagnostics()
        let uploader = try Uploader(log: log, configuration: testDelivery(), transport: transport, clock: ManualClock(), diagnostics: diagnostics.handler)
        let result = await uploader.flush()
        guard case .failed(let error) = result.outcome else { Issue.record("expected failed, got \(result)"); return }
        check(error, c)
        #expect(result.remaining == 3)
        if c.reported {
            #expect(diagnostics.errors.count == 1, "\(diagnostics.all.withLock { $0 })")
            if let reported = diagnostics.errors.first {
                check(reported, c)
                #expect(reported.message == error.message)
            }
        } else {
            // A retried failure is reported once, as the pause it starts (issue 28), with the error.
            let all = diagnostics.all.withLock { $0 }
            #expect(all.count == 1 && all.first?.subject == "paused" && all.first?.severity == .warning, "\(all)")
            if let reported = diagnostics.errors.first { check(reported, c) }
        }
        _ = await uploader.shutdown(timeout: .zero)
    }

    @Test("retries exhausted by the flush's timeout: the failure retried is the result, with its status and answer", arguments: [503, 429])
    func retriesExhausted(status: Int) async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<3)
        let transport = InMemoryTransport()
        transport.defaultReply = .status(status, body: "busy \(status)")
        var config = testDelivery()
        config.backoff = .init(initial: .seconds(1), maximum: .seconds(1), jitter: false)
        let clock = ManualClock()
        let uploader = try Uploader(log: log, configuration: config, transport: transport, clock: clock)
        // Passes at 0, 1, 2 and 3 s; the next retry (4 s) is past the timeout.
        let flush = Task { await uploader.flush(timeout: .milliseconds(3500)) }
        for _ in 0..<3 {
            await clock.waitForSleepers(count: 1)
            _ = clock.advanceToNextDeadline()
        }
        let result = await flush.value
        guard case .failed(let error) = result.outcome else { Issue.record("expected failed, got \(result)"); return }
        #expect(transport.requests.count >= 4, "retried until the timeout")
        #expect(error.code == .transient && error.status == status && error.answer == "busy \(status)" && error.cause == nil, "\(error)")
        _ = await uploader.shutdown(timeout: .zero)
    }

    @Test("an event the collector refuses (400) is set aside; the diagnostic carries .rejected with the status and answer")
    func rejected() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<4, markerAt: [2])
        let transport = InMemoryTransport()
        transport.setHandler { String(decoding: $0.body, as: UTF8.self).contains("POISON") ? .status(400, body: "field item: unknown value") : nil }
        let diagnostics = Diagnostics()
        let uploader = try Uploader(log: log, configuration: testDelivery(), transport: transport, clock: ManualClock(), diagnostics: diagnostics.handler)
        let result = await uploader.flush()
        #expect(result.outcome.isComplete && result.sent == 3 && result.dropped[.rejected] == 1, "\(result)")
        let errors = diagnostics.errors
        #expect(errors.count == 1, "\(errors)")
        if let error = errors.first {
            #expect(error.code == .rejected && error.status == 400 && error.answer == "field item: unknown value" && error.cause == nil, "\(error)")
            #expect(error.message.contains("rejected.jsonl"), "\(error.message)")
        }
        _ = await uploader.shutdown(timeout: .zero)
    }

    @Test("a storage failure: .storage with the BeaconLogError as its cause, reported once")
    func storage() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let fs = FaultyFileSystem()
        var logConfig = BeaconLog.Configuration(directory: dir.path)
        logConfig.fileSystem = fs
        let log = try BeaconLog(configuration: logConfig)
        for i in 0..<3 { try log.append(deliveryEvent(i)) }
        try log.sync()
        fs.inject(nil, errno: EIO, path: "delivery.inflight")
        let diagnostics = Diagnostics()
        let uploader = try Uploader(log: log, configuration: testDelivery(), transport: InMemoryTransport(), clock: ManualClock(), diagnostics: diagnostics.handler)
        for _ in 0..<2 {
            let result = await uploader.flush()
            guard case .failed(let error) = result.outcome else { Issue.record("expected failed, got \(result)"); return }
            #expect(error.code == .storage && error.status == nil && error.answer == nil, "\(error)")
            let cause = error.cause as? BeaconLogError
            #expect(cause?.errno == EIO, "cause: \(String(describing: error.cause))")
            #expect(cause?.path?.contains("delivery.inflight") == true, "cause: \(String(describing: cause))")
        }
        #expect(diagnostics.errors.count == 1, "the same failure again is not reported again: \(diagnostics.all.withLock { $0 })")
        #expect(diagnostics.errors.first?.code == .storage && diagnostics.errors.first?.cause is BeaconLogError)
        fs.clearFaults()
        #expect(await uploader.flush().sent == 3)
        _ = await uploader.shutdown(timeout: .zero)
    }

    @Test("the answer is cut to 512 bytes, marked, at a character boundary")
    func answerExcerptLength() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<1)
        let transport = InMemoryTransport()
        transport.defaultReply = .status(500, body: String(repeating: "é", count: 2000))
        let uploader = try Uploader(log: log, configuration: testDelivery(), transport: transport, clock: ManualClock())
        guard case .failed(let error) = await uploader.flush().outcome, let answer = error.answer else { Issue.record("expected a failure with an answer"); return }
        #expect(answer.utf8.count <= 512 && answer.utf8.count >= 500, "\(answer.utf8.count) bytes")
        #expect(answer.hasSuffix("é…"))
        for limit in [3, 4, 5, 10, 512] {
            for body in [Array(String(repeating: "é", count: 600).utf8), Array(String(repeating: "a", count: 600).utf8)] {
                #expect(AnswerExcerpt.text(body, limit: limit).utf8.count <= limit, "limit \(limit)")
            }
        }
        _ = await uploader.shutdown(timeout: .zero)
    }

    static let secrets = ["top-secret-token", "s3cret-pass", "qs-secret-value", "alice-user"]

    @Test("a collector or transport that echoes the credentials: masked in answer, message, cause, diagnostics and rejected.jsonl", arguments: [401, 503, 400, 0])
    func credentialsNeverShown(status: Int) async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<1)
        let url = URL(string: "http://alice-user:s3cret-pass@127.0.0.1:9/events?password=qs-secret-value")!
        var config = testDelivery(url)
        config.headers = ["Authorization": "Bearer top-secret-token"]
        let echo = "you sent Authorization: Bearer top-secret-token, token top-secret-token to \(url.absoluteString) as alice-user with s3cret-pass"
        let transport = InMemoryTransport()
        // A long prefix puts the secrets across the 512 and 1024 byte cuts too.
        for pad in [0, 480, 500, 1000, 1010] {
            let body = String(repeating: "x", count: pad) + echo
            transport.enqueue(status == 0 ? .failure(TransportError(.network, body)) : .status(status, body: body))
        }
        let diagnostics = Diagnostics()
        let uploader = try Uploader(log: log, configuration: config, transport: transport, clock: ManualClock(), diagnostics: diagnostics.handler)
        var shown: [String] = []
        for _ in 0..<5 {
            let result = await uploader.flush()
            shown.append(result.description)
            if case .failed(let error) = result.outcome {
                shown += [error.description, error.message, error.answer ?? "", String(describing: error.cause)]
                if status == 0 { #expect(error.cause is TransportError) }
            }
            if status == 400 { try log.append(deliveryEvent(1)); try log.sync() }
        }
        shown += diagnostics.all.withLock { $0.map { "\($0) \(String(describing: $0.deliveryError)) \($0.deliveryError?.answer ?? "")" } }
        shown += dir.rejectedLines
        shown.append(String(describing: uploader.stats))
        #expect(shown.contains { $0.contains("***") }, "the echo is still shown, masked: \(shown)")
        for text in shown {
            for secret in Self.secrets {
                #expect(!text.contains(secret), "\(secret) in \(text)")
            }
        }
        _ = await uploader.shutdown(timeout: .zero)
    }

    @Test("over real sockets: a refused connection and a timeout carry the transport's error")
    func realSockets() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<2)
        let collector = try LoopbackCollector()
        defer { collector.stop() }
        collector.defaultReply = .never
        var config = testDelivery(collector.url)
        config.requestTimeout = .milliseconds(300)
        let silent = try Uploader(log: log, configuration: config)
        guard case .failed(let timeout) = await silent.flush().outcome else { Issue.record("expected a timeout"); return }
        #expect(timeout.code == .transient && timeout.status == nil && timeout.answer == nil)
        #expect((timeout.cause as? TransportError)?.code == .timeout, "\(String(describing: timeout.cause))")
        _ = await silent.shutdown(timeout: .zero)

        let closed = try freeLoopbackPort()
        let refusing = try Uploader(log: log, configuration: testDelivery(URL(string: "http://127.0.0.1:\(closed)/events")!))
        guard case .failed(let refused) = await refusing.flush().outcome else { Issue.record("expected a refused connection"); return }
        #expect(refused.code == .transient && refused.status == nil && refused.answer == nil)
        #expect((refused.cause as? TransportError)?.code == .network, "\(String(describing: refused.cause))")
        _ = await refusing.shutdown(timeout: .zero)
    }

    @Test("the tracker: flush(timeout:) and its diagnostics carry the uploader's error")
    func tracker() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let transport = InMemoryTransport()
        transport.defaultReply = .status(403, body: "key lacks insert permission")
        let diagnostics = Diagnostics()
        var config = Beacon.Configuration(directory: dir.path, serverURL: URL(string: "http://127.0.0.1:9/events")!)
        config.lifecycleEvents = false
        config.transport = transport
        config.diagnostics = diagnostics.handler
        config.delivery = testDelivery()
        let beacon = try Beacon(configuration: config)
        beacon.track("Numbered")
        // The 403 ends the flush at once; the long timeout only covers a loaded machine (an
        // AddressSanitizer run beside others took more than 5 s to get the first answer).
        let result = await beacon.flush(timeout: .seconds(40))
        guard case .failed(let error) = result.outcome else { Issue.record("expected failed, got \(result)"); return }
        #expect(error.code == .configuration && error.status == 403 && error.answer == "key lacks insert permission" && error.cause == nil, "\(error)")
        #expect(await eventually { diagnostics.errors.contains { $0.status == 403 && $0.answer == "key lacks insert permission" } }, "\(diagnostics.all.withLock { $0 })")
        _ = await beacon.shutdown(timeout: .zero)
    }

    @Test("the tracker: a flush during or after the background loop's request that meets the collector's 403 reports that error, not its deadline", arguments: [false, true])
    func trackerAfterTheLoopFailed(during: Bool) async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        try deliveryLog(dir, events: 0..<1).close()
        let transport = InMemoryTransport()
        transport.defaultReply = .status(403, body: "key lacks insert permission")
        var config = Beacon.Configuration(directory: dir.path, serverURL: URL(string: "http://127.0.0.1:9/events")!)
        config.lifecycleEvents = false
        config.transport = transport
        config.diagnostics = { _ in }
        config.delivery = testDelivery()
        if during { transport.hold() }
        let beacon = try Beacon(configuration: config)
        // The loop's first pass (events of an earlier run) sends them: the flush comes while
        // that request waits for its 403, or after it.
        // (30 s: the AddressSanitizer pass of CI, beside slow suites, took more than 5 s to start it.)
        #expect(await eventually(30) { transport.requests.count >= 1 })
        let flush = Task { await beacon.flush(timeout: .seconds(40)) }
        try await Task.sleep(for: .milliseconds(50))
        if during { transport.release() }
        let result = await flush.value
        guard case .failed(let error) = result.outcome else { Issue.record("expected failed, got \(result)"); return }
        #expect(error.code == .configuration && error.status == 403, "\(error)")
        _ = await beacon.shutdown(timeout: .zero)
    }
}
