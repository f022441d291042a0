import Foundation
import Glibc
import Testing
import BeaconTestTraits

/// `url` with credentials in its user info and its query, as ClickHouse takes them.
func withSecrets(_ url: String) -> String {
    url.replacingOccurrences(of: "http://", with: "http://alice:s3cret@") + "?user=default&password=s3cret"
}

@Suite("beacon send never prints a URL's credentials or query values", .serialized, .blocking)
struct SendRedactionTests {
    func expectNoSecret(_ result: ToolResult, _ what: String) {
        for output in [result.stderr, result.stdoutText] {
            #expect(!output.contains("s3cret") && !output.contains("alice"), "\(what): \(output)")
        }
    }

    @Test("a collector answering an error: the URL is named redacted, the secret never", arguments: [500, 401])
    func collectorError(status: Int) throws {
        try withTemporaryDirectory { dir in
            let out = dir + ".collected"
            defer { try? FileManager.default.removeItem(atPath: out) }
            #expect(try BeaconToolRunner.run(["append", dir], stdin: stdinData(events(3))).status == 0)
            let (collector, url) = try startCollector(out: out, status: status)
            let result = try BeaconToolRunner.run(["send", dir, "--url", withSecrets(url), "--retries", "1"])
            _ = collector.signal(SIGTERM)
            #expect(result.status == 74, "\(result.stderr)")
            #expect(result.stderr.contains("\(status)"), "\(result.stderr)")
            #expect(result.stderr.contains("http://***@127.0.0.1:"), "\(result.stderr)")
            #expect(result.stderr.contains("?user=***&password=***"), "\(result.stderr)")
            expectNoSecret(result, "HTTP \(status)")
        }
    }

    @Test("an unreachable collector: the connection error never shows the secret")
    func unreachable() throws {
        try withTemporaryDirectory { dir in
            #expect(try BeaconToolRunner.run(["append", dir], stdin: stdinData(events(3))).status == 0)
            // Bound and never listening while send runs: no other test's server can take the port
            // (a port read back and closed could be, and would accept the events).
            let refusing = try RefusingPort()
            let url = withSecrets("http://127.0.0.1:\(refusing.port)/events")
            let result = try withExtendedLifetime(refusing) { try BeaconToolRunner.run(["send", dir, "--url", url, "--retries", "1"]) }
            #expect(result.status == 74, "\(result.stderr)")
            #expect(result.stderr.contains("password=***"), "\(result.stderr)")
            expectNoSecret(result, "unreachable")
        }
    }

    @Test("a drained send names the URL redacted")
    func drained() throws {
        try withTemporaryDirectory { dir in
            let out = dir + ".collected"
            defer { try? FileManager.default.removeItem(atPath: out) }
            #expect(try BeaconToolRunner.run(["append", dir], stdin: stdinData(events(3))).status == 0)
            let (collector, url) = try startCollector(out: out)
            let result = try BeaconToolRunner.run(["send", dir, "--url", withSecrets(url)])
            _ = collector.signal(SIGTERM)
            #expect(result.status == 0, "\(result.stderr)")
            #expect(result.stderr.contains("sent 3 events to http://***@127.0.0.1:"), "\(result.stderr)")
            expectNoSecret(result, "drained")
        }
    }

    @Test("usage errors quoting a URL never show the secret", arguments: [
        ["send", "/tmp/x", "--url", "ftp://alice:s3cret@h/?password=s3cret"],
        ["send", "/tmp/x", "http://alice:s3cret@h/?password=s3cret", "--url", "http://h/"],
    ])
    func usage(arguments: [String]) throws {
        let result = try BeaconToolRunner.run(arguments)
        #expect(result.status == 64, "\(result.stderr)")
        #expect(result.stderr.contains("password=***"), "\(result.stderr)")
        expectNoSecret(result, "usage")
    }

    /// Issue 26 (4): a collector that answers 400 to everything (nginx asking for a client
    /// certificate, http:// to an https port) had every event set aside and send exit 0.
    @Test("a collector refusing every request with 400: nothing set aside, send exits 74 saying the collector refuses this client, next to the redacted URL")
    func refusedEverythingIsReported() throws {
        try withTemporaryDirectory { dir in
            let out = dir + ".collected"
            defer { try? FileManager.default.removeItem(atPath: out) }
            #expect(try BeaconToolRunner.run(["append", dir], stdin: stdinData(events(3))).status == 0)
            let (collector, url) = try startCollector(out: out, status: 400)
            let result = try BeaconToolRunner.run(["send", dir, "--url", withSecrets(url)])
            _ = collector.signal(SIGTERM)
            #expect(result.status == 74, "\(result.stderr)")
            #expect(result.stderr.contains("answered 400 to every request, down to single events, and accepted none"), "\(result.stderr)")
            #expect(result.stderr.contains("3 stay pending"), "\(result.stderr)")
            #expect(!FileManager.default.fileExists(atPath: dir + "/rejected.jsonl"))
            #expect(try statusJSON(dir)["pending_records"] as? Int == 3)
            expectNoSecret(result, "refused everything")
        }
    }
}
