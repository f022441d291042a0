@testable import BeaconHTTP
@testable import BeaconTLS
import BeaconTestSupport
import COpenSSL  // with SocketTransportTLSEdgeTests importing it, the socket declarations it includes are seen through it
import Foundation
import Glibc
import Synchronization
import Testing
import BeaconTestTraits
@testable import Beacon
import BeaconLog

/// `SocketTransport` over TLS against nginx with certificates the test makes (``TLSTestServer``):
/// what is refused, and why, and what is delivered.
@Suite("SocketTransport: https against nginx", .enabled(if: TLSTestServer.isAvailable, Comment(rawValue: TLSTestServer.skipReason)), .timeLimit(.minutes(1)), .blocking)
struct SocketTransportTLSTests {
    func request(_ url: URL) -> TransportRequest {
        TransportRequest(url: url, headers: [("Content-Type", "application/json")], body: Array("[{\"e\":1}]".utf8), timeout: .seconds(60))
    }

    /// The error `transport` throws for `url` (an issue when it answers instead).
    func refusal(_ transport: SocketTransport, _ url: URL) async -> TransportError? {
        await SocketTransportTests().failure { try await transport.send(request(url)) }
    }

    @Test("a certificate from the CA named by caFile is delivered to, by host name (DNS SAN) and by 127.0.0.1 (IP SAN)")
    func trustedCA() async throws {
        let server = try TLSTestServer()
        defer { server.stop() }
        let transport = try SocketTransport(tls: TLSConfiguration(caFile: server.pki.caFile))
        for host in ["localhost", "127.0.0.1"] {
            let response = try await transport.send(request(server.url(.good, host: host)))
            #expect(response.status == 200, "\(host)")
            #expect(String(decoding: response.body, as: UTF8.self) == "ok\n")
        }
    }

    @Test("refused, with the check that failed and the host, as a TLS (configuration) error: unknown CA, another host name, expired, the system's trust store alone")
    func refusedCertificates() async throws {
        let server = try TLSTestServer()
        defer { server.stop() }
        let trusting = try SocketTransport(tls: TLSConfiguration(caFile: server.pki.caFile))
        let cases: [(SocketTransport, URL, String)] = [
            (trusting, server.url(.unknownCA), "unable to get local issuer certificate"),
            (trusting, server.url(.wrongHost), "hostname mismatch"),
            (trusting, server.url(.wrongHost, host: "127.0.0.1"), "IP address mismatch"),
            (trusting, server.url(.expired), "certificate has expired"),
            (SocketTransport(), server.url(.good), "unable to get local issuer certificate"),
        ]
        for (transport, url, check) in cases {
            let error = await refusal(transport, url)
            #expect(error?.code == .tls, "\(url): \(String(describing: error))")
            #expect(error?.message.contains(check) == true, "\(url): \(String(describing: error))")
            #expect(error?.message.contains("\(url.host!):\(url.port!)") == true, "the host is named: \(String(describing: error))")
        }
    }

    @Test("a server offering only TLS 1.0 is refused, saying TLS 1.2 or later is needed; an https URL to a plain http port says the port may not speak TLS")
    func protocolRefusals() async throws {
        let server = try TLSTestServer()
        defer { server.stop() }
        let transport = try SocketTransport(tls: TLSConfiguration(caFile: server.pki.caFile))
        let old = await refusal(transport, server.url(.tls10))
        #expect(old?.code == .tls, "\(String(describing: old))")
        #expect(old?.message.contains("TLS 1.2 or later") == true, "\(String(describing: old))")
        let plain = try #require(URL(string: "https://localhost:\(server.ports[.plain]!)/events"))
        let notTLS = await refusal(transport, plain)
        #expect(notTLS?.code == .tls, "\(String(describing: notTLS))")
        #expect(notTLS?.message.contains("does the port speak TLS") == true, "\(String(describing: notTLS))")
    }

    @Test("a collector asking for a client certificate: refused without one, delivered with certificateFile and privateKeyFile")
    func clientCertificate() async throws {
        let server = try TLSTestServer()
        defer { server.stop() }
        let without = try SocketTransport(tls: TLSConfiguration(caFile: server.pki.caFile))
        #expect(try await without.send(request(server.url(.clientCertificate))).status == 403)
        let with = try SocketTransport(tls: TLSConfiguration(caFile: server.pki.caFile, certificateFile: server.pki.certificate("client"), privateKeyFile: server.pki.key("client")))
        #expect(try await with.send(request(server.url(.clientCertificate))).status == 200)
    }

    @Test("a reconnection resumes the TLS session (nginx closes after 2 requests)")
    func sessionResumed() async throws {
        let server = try TLSTestServer()
        defer { server.stop() }
        let transport = try SocketTransport(tls: TLSConfiguration(caFile: server.pki.caFile))
        for _ in 0..<6 {
            #expect(try await transport.send(request(server.url(.good))).status == 200)
        }
        let context = try transport.tlsContext()
        #expect(transport.connectionsOpened == 3)
        #expect(context.handshakes.load(ordering: .relaxed) == 3)
        #expect(context.resumedHandshakes.load(ordering: .relaxed) == 2)
    }

    @Test("an idle TLS connection is seen closed once the server closed it, before a request is written to it")
    func idleConnectionClosed() async throws {
        let server = try TLSTestServer()
        defer { server.stop() }
        let context = try TLSContext(TLSConfiguration(caFile: server.pki.caFile))
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = server.ports[.good]!.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        try #require(connected == 0)
        _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
        let stream = try TLSStream(fd: fd, host: "localhost", port: server.ports[.good]!, context: context)
        func drive(_ step: () -> StreamResult) throws -> Int {
            let deadline = ContinuousClock.now + .seconds(60)
            while ContinuousClock.now < deadline {
                switch step() {
                case .done(let n): return n
                case .wait: usleep(1000)
                case .failed(let code): throw TLSTestError("errno \(code)")
                case .tls(let failure): throw TLSTestError(failure.message)
                case .truncated: throw TLSTestError("closed without close_notify")
                }
            }
            throw TLSTestError("timed out")
        }
        _ = try drive { stream.handshake() }
        let request = Array("POST /events HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nContent-Length: 2\r\n\r\n[]".utf8)
        let written = try request.withUnsafeBytes { bytes in try drive { stream.write(bytes, UnsafeRawBufferPointer(start: nil, count: 0)) } }
        #expect(written == request.count)
        let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 4096, alignment: 1)
        defer { buffer.deallocate() }
        let answer = try drive { stream.read(into: buffer) }
        #expect(String(decoding: UnsafeRawBufferPointer(rebasing: buffer[..<answer]), as: UTF8.self).hasPrefix("HTTP/1.1 200"))
        #expect(eventually(within: 60) { !stream.isIdle() }, "the server's close was not seen")
        stream.close()
    }

    @Test("the uploader keeps every event and pauses on a refused certificate, like a 401; delivers once the CA is trusted")
    func uploaderPauses() async throws {
        let server = try TLSTestServer()
        defer { server.stop() }
        try await withTrackerDirectory { dir in
            let log = try BeaconLog(configuration: BeaconLog.Configuration(directory: dir))
            for i in 0..<7 { try log.append(Array("{\"i\":\(i)}".utf8)) }
            var configuration = DeliveryConfiguration(url: server.url(.good))
            configuration.flushInterval = nil
            let reports = Mutex<[String]>([])
            let refused = try Uploader(log: log, configuration: configuration, transport: SocketTransport(), diagnostics: { line in reports.withLock { $0.append(line.message) } })
            let result = await refused.flush()
            guard case .failed(let error) = result.outcome else {
                Issue.record("expected a failure, got \(result)")
                return
            }
            #expect(error.code == .configuration, "\(error)")
            #expect("\(error)".contains("unable to get local issuer certificate"), "\(error)")
            #expect(result.sent == 0 && result.remaining == 7)
            #expect(refused.stats.paused == "TLS")
            #expect(reports.withLock { $0.count } == 1, "reported once: \(reports.withLock { $0 })")
            _ = await refused.shutdown(timeout: .zero)
            let trusting = try Uploader(log: log, configuration: configuration, transport: try SocketTransport(tls: TLSConfiguration(caFile: server.pki.caFile)), diagnostics: { _ in })
            let delivered = await trusting.flush()
            #expect(delivered.sent == 7, "\(delivered)")
            _ = await trusting.shutdown(timeout: .zero)
            try log.close()
        }
    }
}

@Suite("TLS: names, settings", .blocking)
struct TLSSettingsTests {
    @Test("a host name is sent as SNI and checked against DNS names; an address literal is not sent and is checked against IP addresses", arguments: [
        ("localhost", TLSPeerName.dns("localhost")),
        ("Collector.Example.", .dns("collector.example")),
        ("collector.example", .dns("collector.example")),
        ("127.0.0.1", .ip("127.0.0.1")),
        ("::1", .ip("::1")),
        ("[::1]", .ip("::1")),
        ("[2001:db8::1]", .ip("2001:db8::1")),
        ("fe80::1%eth0", .ip("fe80::1")),
        ("256.1.1.1", .dns("256.1.1.1")),
        ("xn--bcher-kva.example", .dns("xn--bcher-kva.example")),
    ])
    func peerName(host: String, expected: TLSPeerName) {
        let name = TLSPeerName(host: host)
        #expect(name == expected)
        if case .dns(let dns) = expected { #expect(name.serverName == dns) } else { #expect(name.serverName == nil) }
    }

    @Test("https URLs default to port 443, named in Host only when another")
    func endpoint() throws {
        let implicit = try SocketEndpoint(try #require(URL(string: "https://collector.example/e?x=1")))
        #expect(implicit.secure && implicit.port == 443 && implicit.hostField == "collector.example" && implicit.target == "/e?x=1")
        let explicit = try SocketEndpoint(try #require(URL(string: "https://[::1]:8443/")))
        #expect(explicit.secure && explicit.port == 8443 && explicit.hostField == "[::1]:8443" && explicit.host == "::1")
        let plain = try SocketEndpoint(try #require(URL(string: "http://collector.example:443/")))
        #expect(!plain.secure && plain.hostField == "collector.example:443")
    }

    @Test("TLS settings that cannot work are refused when the transport is made, naming the file")
    func badSettings() {
        let cases: [(TLSConfiguration, String)] = [
            (TLSConfiguration(caFile: "/nonexistent/ca.pem"), "/nonexistent/ca.pem"),
            (TLSConfiguration(caFile: "/etc/hostname"), "/etc/hostname"),
            (TLSConfiguration(certificateFile: "/etc/hostname"), "both its certificate and its key"),
            (TLSConfiguration(trustsSystemRoots: false), "no certificate to trust"),
        ]
        for (configuration, expected) in cases {
            do {
                _ = try SocketTransport(tls: configuration)
                Issue.record("\(configuration) was accepted")
            } catch {
                #expect(error.code == .tls)
                #expect(error.message.contains(expected), "\(error)")
            }
        }
    }
}
