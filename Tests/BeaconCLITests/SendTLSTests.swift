import BeaconTestSupport
import Foundation
import Testing
import BeaconTestTraits

/// `beacon send` to an `https://` nginx (``TLSTestServer``): `--cacert`, `--cert`, `--key`, and
/// what a refused certificate looks like to the user.
@Suite("beacon send over https", .serialized, .enabled(if: TLSTestServer.isAvailable, Comment(rawValue: TLSTestServer.skipReason)), .timeLimit(.minutes(1)), .blocking)
struct SendTLSTests {
    @Test("refused without --cacert (nothing acknowledged, exit 74, the check and host named, what to do), delivered with it")
    func cacert() throws {
        let server = try TLSTestServer()
        defer { server.stop() }
        try withTemporaryDirectory { dir in
            #expect(try BeaconToolRunner.run(["append", dir], stdin: stdinData(events(60))).status == 0)
            let url = server.url(.good).absoluteString
            let refused = try BeaconToolRunner.run(["send", dir, "--url", url, "--batch", "25"])
            #expect(refused.status == 74, "\(refused.stderr)")
            #expect(refused.stderr.contains("unable to get local issuer certificate"), "\(refused.stderr)")
            #expect(refused.stderr.contains("localhost:\(server.ports[.good]!)"), "\(refused.stderr)")
            #expect(refused.stderr.contains("--cacert"), "\(refused.stderr)")
            #expect(refused.stderr.contains("sent 0 events, 60 stay pending"), "\(refused.stderr)")
            let wrongHost = try BeaconToolRunner.run(["send", dir, "--url", server.url(.wrongHost).absoluteString, "--cacert", server.pki.caFile])
            #expect(wrongHost.status == 74 && wrongHost.stderr.contains("hostname mismatch") && wrongHost.stderr.contains("60 stay pending"), "\(wrongHost.stderr)")
            let delivered = try BeaconToolRunner.run(["send", dir, "--url", url, "--batch", "25", "--cacert", server.pki.caFile])
            #expect(delivered.status == 0, "\(delivered.stderr)")
            #expect(delivered.stderr.contains("sent 60 events"), "\(delivered.stderr)")
        }
    }

    /// Issue 26 (4): nginx with `ssl_verify_client on` answers every request "400 No required SSL
    /// certificate was sent" (and "400 The plain HTTP request was sent to HTTPS port" to http://);
    /// send bisected to single events, set all 20 aside and exited 0.
    @Test("nginx requiring a client certificate answers 400 to everything: nothing set aside, send exits 74 and names the answer; with --cert/--key all 20 are delivered")
    func clientCertificateRequired() throws {
        let server = try TLSTestServer()
        defer { server.stop() }
        try withTemporaryDirectory { dir in
            #expect(try BeaconToolRunner.run(["append", dir], stdin: stdinData(events(20))).status == 0)
            let url = server.url(.clientCertificateRequired)
            let plain = "http://localhost:\(url.port!)/events"
            for (target, said) in [(url.absoluteString, "No required SSL certificate was sent"), (plain, "The plain HTTP request was sent to HTTPS port")] {
                let refused = try BeaconToolRunner.run(["send", dir, "--url", target, "--cacert", server.pki.caFile, "--retries", "1"])
                #expect(refused.status == 74, "\(target): \(refused.stderr)")
                #expect(refused.stderr.contains("answered 400") && refused.stderr.contains(said) && refused.stderr.contains("20 stay pending"), "\(target): \(refused.stderr)")
                #expect(!refused.stderr.contains("set aside ("), "\(refused.stderr)")
                #expect(!FileManager.default.fileExists(atPath: dir + "/rejected.jsonl"), "\(target): nothing set aside")
                #expect(try statusJSON(dir)["pending_records"] as? Int == 20)
            }
            let delivered = try BeaconToolRunner.run(["send", dir, "--url", url.absoluteString, "--cacert", server.pki.caFile, "--cert", server.pki.certificate("client"), "--key", server.pki.key("client")])
            #expect(delivered.status == 0 && delivered.stderr.contains("sent 20 events"), "\(delivered.stderr)")
        }
    }

    @Test("a collector asking for a client certificate: refused without --cert/--key, delivered with them; --cacert takes a directory too")
    func clientCertificate() throws {
        let server = try TLSTestServer()
        defer { server.stop() }
        try withTemporaryDirectory { dir in
            #expect(try BeaconToolRunner.run(["append", dir], stdin: stdinData(events(10))).status == 0)
            let url = server.url(.clientCertificate).absoluteString
            let refused = try BeaconToolRunner.run(["send", dir, "--url", url, "--cacert", server.pki.caFile])
            #expect(refused.status == 74 && refused.stderr.contains("403") && refused.stderr.contains("10 stay pending"), "\(refused.stderr)")
            // A CA directory named by subject hash (what `openssl rehash` makes).
            let caDirectory = dir + ".ca"
            defer { try? FileManager.default.removeItem(atPath: caDirectory) }
            try FileManager.default.createDirectory(atPath: caDirectory, withIntermediateDirectories: true)
            let hash = try TLSTestServer.run(TestPKI.openssl!, ["x509", "-hash", "-noout", "-in", server.pki.caFile], in: dir).trimmingCharacters(in: .whitespacesAndNewlines)
            try FileManager.default.copyItem(atPath: server.pki.caFile, toPath: "\(caDirectory)/\(hash).0")
            let delivered = try BeaconToolRunner.run(["send", dir, "--url", url, "--cacert", caDirectory, "--cert", server.pki.certificate("client"), "--key", server.pki.key("client")])
            #expect(delivered.status == 0 && delivered.stderr.contains("sent 10 events"), "\(delivered.stderr)")
        }
    }
}
