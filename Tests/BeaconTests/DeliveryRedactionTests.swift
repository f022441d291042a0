@testable import BeaconHTTP
import Foundation
import BeaconTestSupport
import Testing
@testable import Beacon
import BeaconTesting

@Suite("Delivery: no URL credential or query value in any output", .timeLimit(.minutes(1)))
struct DeliveryRedactionTests {
    @Test("RedactedURL keeps scheme, host, port, path and query names, and masks the rest", arguments: [
        ("http://127.0.0.1:8123/?user=default&password=s3cret", "http://127.0.0.1:8123/?user=***&password=***"),
        ("http://alice:s3cret@127.0.0.1:8123/", "http://***@127.0.0.1:8123/"),
        ("https://alice@collector.example/e", "https://***@collector.example/e"),
        ("http://alice:s3cret@127.0.0.1:8123/?user=default&password=s3cret", "http://***@127.0.0.1:8123/?user=***&password=***"),
        ("https://c.example/e#token=s3cret", "https://c.example/e#***"),
        ("https://c.example/e?key=s3cret#frag", "https://c.example/e?key=***#***"),
        ("https://c.example/e?password=s%33cret&u%73er=x", "https://c.example/e?password=***&u%73er=***"),
        ("http://al%69ce:s%33cret@h:1/p", "http://***@h:1/p"),
        ("https://c.example/events", "https://c.example/events"),
        ("https://c.example/e?", "https://c.example/e?"),
        ("https://c.example/e?s3cret", "https://c.example/e?***"),
        ("https://c.example/e?a=&b=s3cret;c=s3cret&&d", "https://c.example/e?a=&b=***;c=***&&***"),
        ("https://c.example/path@with/at?x=s3cret", "https://c.example/path@with/at?x=***"),
        ("http://user:p@ss@h/", "http://***@h/"),
        ("not a url ?password=s3cret", "not a url ?password=***"),
    ])
    func redaction(input: String, expected: String) throws {
        #expect(RedactedURL(text: input).description == expected)
        if let url = URL(string: input), url.absoluteString == input {
            #expect(RedactedURL(url).description == expected)
            #expect("\(RedactedURL(url))" == expected)
        }
        #expect(!expected.contains("s3cret") && !expected.contains("s%33cret"))
    }

    @Test("a foreign message quoting the URL is scrubbed")
    func scrub() {
        let url = URL(string: "http://alice:s3cret@127.0.0.1:1/?password=s3cret")!
        let text = RedactedURL.scrub("could not load \(url.absoluteString): refused", of: url)
        #expect(text == "could not load http://***@127.0.0.1:1/?password=***: refused")
    }

    /// Issue 26 (7): `?src=chaos` turned "chaos says 503" into "*** says 503" in `rejected.jsonl`.
    @Test("a query value is masked where it appears as a value, not where the collector uses the same word; credentials everywhere")
    func queryValuesOnlyAsValues() throws {
        var configuration = DeliveryConfiguration(url: URL(string: "http://alice:s3cret@127.0.0.1:1/e?src=chaos&token=t0k3nvalue")!)
        configuration.headers["Authorization"] = "Bearer abcdefgh"
        let scrubber = CredentialScrubber(configuration: configuration)
        #expect(scrubber.scrub("chaos says 503") == "chaos says 503")
        #expect(scrubber.scrub("chaos says 503 for /e?src=chaos&token=t0k3nvalue") == "chaos says 503 for /e?src=***&token=***")
        #expect(scrubber.scrub(#"{"src":"chaos","token": "t0k3nvalue"}"#) == #"{"src":"***","token": "***"}"#)
        #expect(scrubber.scrub("user alice, password s3cret, token abcdefgh") == "user ***, password ***, token ***")
        #expect(scrubber.excerpt(Array("chaos says 503; src=chaos".utf8), limit: 100) == "chaos says 503; src=***")
    }

    static let secretURL = "http://alice:s3cret@127.0.0.1:PORT/events?user=default&password=s3cret"

    /// Every string the tracker shows about delivery: diagnostics, the flush result, its error,
    /// delivery stats and the tracker's stats.
    func shownStrings(_ beacon: Beacon, _ result: FlushResult, _ diagnostics: DiagnosticsSink) async -> [String] {
        let stats = beacon.deliveryStats
        var shown = diagnostics.all
        shown += [result.description, "\(result.outcome)", String(describing: stats), String(describing: beacon.stats)]
        if case .failed(let error) = result.outcome { shown += ["\(error)", String(describing: error), error.localizedDescription] }
        shown += [stats.lastError, stats.paused].compactMap { $0 }
        return shown
    }

    func tracker(_ dir: DeliveryTempDir, port: UInt16, timeout: Duration = .seconds(5), diagnostics: DiagnosticsSink) throws -> Beacon {
        let url = URL(string: Self.secretURL.replacingOccurrences(of: "PORT", with: String(port)))!
        var config = Beacon.Configuration(directory: dir.path, serverURL: url)
        config.lifecycleEvents = false
        let sink = diagnostics.handler
        config.diagnostics = { sink($0.description) }
        var delivery = testDelivery(url)
        delivery.requestTimeout = timeout
        config.delivery = delivery
        return try Beacon(configuration: config)
    }

    @Test("the tracker's diagnostics, flush results, errors and stats never show the secret", arguments: [500, 401, 404, 0, -1])
    func trackerNeverShowsTheSecret(answer: Int) async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let collector = try LoopbackCollector()
        defer { collector.stop() }
        var port = collector.port
        let refusing = try RefusingPort()
        switch answer {
        case 0:
            // Nobody listens (and no other test's server can take the port): a connection error.
            port = refusing.port
        case -1:
            collector.defaultReply = .never
        default:
            collector.defaultReply = .status(answer, body: "no")
        }
        let diagnostics = DiagnosticsSink()
        let beacon = try tracker(dir, port: port, timeout: .milliseconds(300), diagnostics: diagnostics)
        for n in 0..<5 { beacon.track("Numbered", properties: ["n": .int(n)]) }
        // One pass stops at its first failure (each request bounded by its timeout): a failure,
        // however slow the machine, with the URL in its error.
        let result = await beacon.flush()
        guard case .failed = result.outcome else {
            Issue.record("expected a failure, got \(result)")
            await beacon.shutdown(timeout: .zero)
            return
        }
        // Retried until a deadline (transient answers): a failure, or the deadline if the machine
        // is too slow for a retry to start; never complete.
        let retried = await beacon.flush(timeout: .seconds(3))
        #expect(!retried.outcome.isComplete, "expected a failure or the deadline, got \(retried)")
        let shown = await shownStrings(beacon, result, diagnostics) + shownStrings(beacon, retried, diagnostics)
        let report = await beacon.shutdown(timeout: .milliseconds(500))
        let all = shown + [report.description]
        #expect(all.contains { $0.contains("password=***") }, "the URL is still named, redacted: \(all)")
        for text in all {
            #expect(!text.contains("s3cret") && !text.contains("alice"), "\(text)")
        }
    }
}
