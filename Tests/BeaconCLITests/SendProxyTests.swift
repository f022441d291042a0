import Foundation
import Testing
import BeaconTestTraits

/// `beacon send` through ``TestProxy`` (a small HTTP proxy of the test support): `--transport auto`
/// honours the proxy variables as curl does, and a proxy's refusal reads as one.
@Suite("beacon send through a proxy", .serialized, .timeLimit(.minutes(1)), .blocking)
struct SendProxyTests {
    /// The proxy variables set as given, every other one empty (the machine's own must not interfere).
    static func environment(_ set: [String: String]) -> [String: String] {
        var environment = Dictionary(uniqueKeysWithValues: ["http_proxy", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY", "no_proxy", "NO_PROXY"].map { ($0, "") })
        environment.merge(set) { $1 }
        return environment
    }

    @Test("http through http_proxy with credentials: delivered via the proxy (the collector's name resolves nowhere), the password never printed; wrong credentials: 74, the proxy's 407 explained")
    func httpThroughProxy() throws {
        try withTemporaryDirectory { dir in
            let out = dir + ".collected"
            defer { try? FileManager.default.removeItem(atPath: out) }
            let sent = events(30)
            #expect(try BeaconToolRunner.run(["append", dir], stdin: stdinData(sent)).status == 0)
            let (collector, url) = try startCollector(out: out)
            defer { _ = collector.signal(SIGTERM) }
            let proxy = try TestProxy(credentials: "beacon:s3cret")
            defer { proxy.stop() }
            let viaName = url.replacingOccurrences(of: "127.0.0.1", with: "collector.test")

            let refused = try BeaconToolRunner.run(["send", dir, "--url", viaName], environment: Self.environment(["http_proxy": proxy.url(credentials: "beacon:wrong")]))
            #expect(refused.status == 74, "\(refused.stderr)")
            #expect(refused.stderr.contains("407") && refused.stderr.contains("proxy") && !refused.stderr.contains("wrong") && refused.stderr.contains("30 stay pending"), "\(refused.stderr)")

            let result = try BeaconToolRunner.run(["send", dir, "--url", viaName, "--batch", "10"], environment: Self.environment(["http_proxy": proxy.url(credentials: "beacon:s3cret")]))
            #expect(result.status == 0, "\(result.stderr)")
            #expect(result.stderr.contains("sent 30 events") && !result.stderr.contains("s3cret"), "\(result.stderr)")
            #expect(eventually { lines(of: out) == sent })
            let seen = proxy.requests
            #expect(seen.count >= 2 && seen.allSatisfy { $0.method == "POST" && $0.target.hasPrefix("http://collector.test:") }, "\(seen)")
            #expect(seen.filter { $0.forwardedHead != nil }.allSatisfy { $0.proxyAuthorization == "Basic " + Data("beacon:s3cret".utf8).base64EncodedString() }, "\(seen)")
        }
    }

    @Test("https through https_proxy: a CONNECT tunnel with TLS to the collector inside, verified with --cacert", .enabled(if: TLSTestServer.isAvailable, Comment(rawValue: TLSTestServer.skipReason)))
    func httpsThroughProxy() throws {
        let server = try TLSTestServer()
        defer { server.stop() }
        let proxy = try TestProxy()
        defer { proxy.stop() }
        try withTemporaryDirectory { dir in
            #expect(try BeaconToolRunner.run(["append", dir], stdin: stdinData(events(20))).status == 0)
            let result = try BeaconToolRunner.run(["send", dir, "--url", server.url(.good).absoluteString, "--cacert", server.pki.caFile, "--batch", "10"], environment: Self.environment(["HTTPS_PROXY": proxy.url()]))
            #expect(result.status == 0 && result.stderr.contains("sent 20 events"), "\(result.stderr)")
            #expect(proxy.requests.contains { $0.method == "CONNECT" && $0.target == "localhost:\(server.ports[.good]!)" }, "\(proxy.requests)")
        }
    }
}
