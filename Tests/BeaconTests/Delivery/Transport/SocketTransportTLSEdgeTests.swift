import BeaconTestSupport
import COpenSSL
import Foundation
import Glibc
import Testing
@testable import Beacon

/// `SocketTransport` over TLS against a one-connection server of the test's own (OpenSSL's
/// `SSL_accept` on a thread), for what nginx will not do: serve a certificate without
/// subjectAltName, close without close_notify (issue 26, defect 6).
@Suite("SocketTransport: https edge cases against a server of the test's own", .enabled(if: TestPKI.openssl != nil, "openssl is not installed: SKIPPED"), .timeLimit(.minutes(1)))
struct SocketTransportTLSEdgeTests {
    /// How the server ends its one answer.
    enum Ending {
        /// `SSL_shutdown` (close_notify), then close.
        case closeNotify
        /// close(2) alone: the TCP FIN without TLS's goodbye (what a forged close looks like).
        case tcpCloseOnly
        /// close(2) right after the handshake, before reading the request (a reset mid-request).
        case closeBeforeReading
    }

    /// Serves one connection on 127.0.0.1 with `certificate`: reads one request, writes `answer`,
    /// ends as `ending` says.
    final class OneShotTLSServer: @unchecked Sendable {
        let port: UInt16
        private let listener: Int32
        private let context: OpaquePointer
        private let done = DispatchSemaphore(value: 0)

        init(certificate: String, key: String, answer: String, ending: Ending) throws {
            guard let context = SSL_CTX_new(TLS_server_method()) else { throw TLSTestError("SSL_CTX_new failed") }
            guard SSL_CTX_use_certificate_chain_file(context, certificate) == 1, SSL_CTX_use_PrivateKey_file(context, key, SSL_FILETYPE_PEM) == 1 else {
                SSL_CTX_free(context)
                throw TLSTestError("cannot load \(certificate) / \(key)")
            }
            self.context = context
            let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var address = loopbackAddress(0)
            _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
            Glibc.listen(listener, 4)
            var length = socklen_t(MemoryLayout<sockaddr_in>.size)
            _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) } }
            self.listener = listener
            port = UInt16(bigEndian: address.sin_port)
            let done = self.done
            nonisolated(unsafe) let serverContext = context  // SSL_new on it is thread-safe
            Thread {
                defer { done.signal() }
                let fd = accept(listener, nil, nil)
                guard fd >= 0 else { return }
                defer { close(fd) }
                guard let ssl = SSL_new(serverContext) else { return }
                defer { SSL_free(ssl) }
                SSL_set_fd(ssl, fd)
                guard SSL_accept(ssl) == 1 else { return }  // the client refused the certificate
                if ending == .closeBeforeReading { return }
                var request: [UInt8] = []
                var buffer = [UInt8](repeating: 0, count: 4096)
                while !Self.holdsWholeRequest(request) {
                    let n = SSL_read(ssl, &buffer, Int32(buffer.count))
                    if n <= 0 { return }
                    request += buffer[..<Int(n)]
                }
                let bytes = Array(answer.utf8)
                _ = SSL_write(ssl, bytes, Int32(bytes.count))
                if ending == .closeNotify { _ = SSL_shutdown(ssl) }
                // Let the answer's bytes reach the client before the FIN (no RST for unread data).
                shutdown(fd, Int32(SHUT_WR))
                _ = SSL_read(ssl, &buffer, Int32(buffer.count))
            }.start()
        }

        static func holdsWholeRequest(_ bytes: [UInt8]) -> Bool {
            let text = String(decoding: bytes, as: UTF8.self)
            guard let end = text.range(of: "\r\n\r\n") else { return false }
            let length = text[..<end.lowerBound].split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
                .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? 0
            return text.utf8.count - text[..<end.upperBound].utf8.count >= length
        }

        var url: URL { URL(string: "https://localhost:\(port)/events")! }

        /// Waits for the connection to end (or for a client that never came: the listener is shut).
        func stop() {
            shutdown(listener, Int32(SHUT_RDWR))
            done.wait()
            close(listener)
            SSL_CTX_free(context)
        }
    }

    func request(_ url: URL) -> TransportRequest {
        TransportRequest(url: url, headers: [("Content-Type", "application/json")], body: Array("[{\"e\":1}]".utf8), timeout: .seconds(60))
    }

    static func pki() throws -> TestPKI { try TestPKI.shared.get() }

    /// A certificate for localhost signed by the test CA, with `extensions`; its (pem, key).
    static func certificate(_ name: String, subject: String, extensions: String) throws -> (String, String) {
        let pki = try pki()
        let openssl = try #require(TestPKI.openssl)
        let base = "\(name)-\(UInt32.random(in: 0...UInt32.max))"
        try extensions.write(toFile: "\(pki.directory)/\(base).ext", atomically: true, encoding: .utf8)
        _ = try TLSTestServer.run(openssl, ["req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes", "-keyout", "\(base).key", "-out", "\(base).csr", "-subj", subject], in: pki.directory)
        _ = try TLSTestServer.run(openssl, ["x509", "-req", "-in", "\(base).csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-set_serial", "\(Int.random(in: 1000...999_999))",
                                            "-out", "\(base).pem", "-days", "2", "-extfile", "\(base).ext"], in: pki.directory)
        return ("\(pki.directory)/\(base).pem", "\(pki.directory)/\(base).key")
    }

    /// TLS writes through Beacon's own socket BIO (`send` with `MSG_NOSIGNAL`; OpenSSL's own uses
    /// write(2)); in a child whose SIGPIPE is at its default action, as this test process's is not.
    /// Like the plain test, it guards the outcome: it passes without MSG_NOSIGNAL too (checked),
    /// since no write follows the first failed one (a broken stream is closed without goodbye).
    @Test("a TLS server closing mid-request does not kill a process whose SIGPIPE is at its default action")
    func tlsClosedMidRequestRaisesNoSIGPIPE() async throws {
        let pki = try Self.pki()
        for _ in 0..<2 {
            let server = try OneShotTLSServer(certificate: pki.certificate("good"), key: pki.key("good"), answer: Self.okAnswer, ending: .closeBeforeReading)
            defer { server.stop() }
            let ran = try await SocketTransportTests.runSendChild([server.url.absoluteString, String(16 << 20), "1", pki.caFile])
            #expect(ran.ending == .exited(0), "\(ran.ending): \(ran.output)")
            // A reset mid-record reads as a broken connection (network); what matters is the exit.
            #expect(ran.output.contains("error network") || ran.output.contains("error tls"), "\(ran.output)")
        }
    }

    static let okAnswer = "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nConnection: close\r\n\r\nok\n"

    @Test("a certificate naming the host only in its CN (no subjectAltName) is refused; the same host in a DNS SAN is accepted")
    func commonNameAloneIsRefused() async throws {
        let pki = try Self.pki()
        let transport = try SocketTransport(tls: TLSConfiguration(caFile: pki.caFile))
        let cnOnly = try Self.certificate("cn-only", subject: "/CN=localhost", extensions: "extendedKeyUsage=serverAuth")
        let refusing = try OneShotTLSServer(certificate: cnOnly.0, key: cnOnly.1, answer: Self.okAnswer, ending: .closeNotify)
        let refusal = await SocketTransportTests().failure { try await transport.send(request(refusing.url)) }
        refusing.stop()
        #expect(refusal?.code == .tls, "\(String(describing: refusal))")
        #expect(refusal?.message.contains("hostname mismatch") == true, "\(String(describing: refusal))")

        let san = try Self.certificate("san", subject: "/CN=localhost", extensions: "subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth")
        let accepting = try OneShotTLSServer(certificate: san.0, key: san.1, answer: Self.okAnswer, ending: .closeNotify)
        defer { accepting.stop() }
        let response = try await transport.send(request(accepting.url))
        #expect(response.status == 200)
    }

    @Test("an answer whose body runs until the close: complete after close_notify, an error after a TCP close alone (RFC 9112 §9.8)")
    func closeDelimitedBodyNeedsCloseNotify() async throws {
        let pki = try Self.pki()
        let answer = "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\naccepted 1 event"
        let good = (pki.certificate("good"), pki.key("good"))

        let clean = try OneShotTLSServer(certificate: good.0, key: good.1, answer: answer, ending: .closeNotify)
        let response = try await SocketTransport(tls: TLSConfiguration(caFile: pki.caFile)).send(request(clean.url))
        clean.stop()
        #expect(response.status == 200 && String(decoding: response.body, as: UTF8.self) == "accepted 1 event")

        let cut = try OneShotTLSServer(certificate: good.0, key: good.1, answer: answer, ending: .tcpCloseOnly)
        defer { cut.stop() }
        let failure = await SocketTransportTests().failure { try await SocketTransport(tls: TLSConfiguration(caFile: pki.caFile)).send(request(cut.url)) }
        #expect(failure?.code == .network, "\(String(describing: failure))")
        #expect(failure?.message.contains("close_notify") == true, "\(String(describing: failure))")
    }

    @Test("an answer framed by Content-Length is complete even when the server then closes without close_notify")
    func framedAnswerThenTCPClose() async throws {
        let pki = try Self.pki()
        let server = try OneShotTLSServer(certificate: pki.certificate("good"), key: pki.key("good"), answer: Self.okAnswer, ending: .tcpCloseOnly)
        defer { server.stop() }
        let response = try await SocketTransport(tls: TLSConfiguration(caFile: pki.caFile)).send(request(server.url))
        #expect(response.status == 200 && String(decoding: response.body, as: UTF8.self) == "ok\n")
    }
}
