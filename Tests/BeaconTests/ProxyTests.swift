@testable import BeaconHTTP
import Foundation
import Synchronization
import Testing
@testable import Beacon
import BeaconTesting

/// The proxy decision: environment and URL in, route out, as curl decides.
@Suite("Proxies: the route from the environment")
struct ProxyRouteTests {
    typealias Proxy = ProxyRoute.Proxy
    static let basic = "Basic " + Data("u:p@ss".utf8).base64EncodedString()

    static func proxy(_ host: String, _ port: UInt16, from variable: String, authorization: String? = nil) -> ProxyRoute {
        .proxy(Proxy(host: host, port: port, authorization: authorization, variable: variable))
    }

    /// (URL, environment, route).
    static let table: [(String, [String: String], ProxyRoute)] = [
        // Nothing set, or set empty.
        ("http://c.example/e", [:], .direct),
        ("https://c.example/e", ["https_proxy": "", "all_proxy": ""], .direct),
        // http: http_proxy only in lowercase; HTTP_PROXY is ignored (curl, httpoxy).
        ("http://c.example/e", ["http_proxy": "http://p:3128"], proxy("p", 3128, from: "http_proxy")),
        ("http://c.example/e", ["HTTP_PROXY": "http://p:3128"], .direct),
        ("http://c.example/e", ["https_proxy": "http://p:3128"], .direct),
        // https: lowercase first, then uppercase.
        ("https://c.example/e", ["https_proxy": "http://p:3128"], proxy("p", 3128, from: "https_proxy")),
        ("https://c.example/e", ["HTTPS_PROXY": "http://p:3128"], proxy("p", 3128, from: "HTTPS_PROXY")),
        ("https://c.example/e", ["https_proxy": "http://a:1", "HTTPS_PROXY": "http://b:2"], proxy("a", 1, from: "https_proxy")),
        ("https://c.example/e", ["http_proxy": "http://p:3128"], .direct),
        // all_proxy for either, after the scheme's own; lowercase first.
        ("http://c.example/e", ["all_proxy": "http://a:1"], proxy("a", 1, from: "all_proxy")),
        ("https://c.example/e", ["ALL_PROXY": "http://b:2"], proxy("b", 2, from: "ALL_PROXY")),
        ("https://c.example/e", ["all_proxy": "http://a:1", "ALL_PROXY": "http://b:2"], proxy("a", 1, from: "all_proxy")),
        ("https://c.example/e", ["all_proxy": "http://a:1", "https_proxy": "http://s:3"], proxy("s", 3, from: "https_proxy")),
        ("http://c.example/e", ["all_proxy": "http://a:1", "http_proxy": ""], proxy("a", 1, from: "all_proxy")),
        // The proxy's own URL: no scheme means http, port 1080 by default, credentials decoded, IPv6.
        ("http://c.example/e", ["http_proxy": "p.example:8080"], proxy("p.example", 8080, from: "http_proxy")),
        ("http://c.example/e", ["http_proxy": "http://p.example"], proxy("p.example", 1080, from: "http_proxy")),
        ("http://c.example/e", ["http_proxy": "http://u:p%40ss@p:3128/"], proxy("p", 3128, from: "http_proxy", authorization: basic)),
        ("http://c.example/e", ["http_proxy": "u:p%40ss@p:3128"], proxy("p", 3128, from: "http_proxy", authorization: basic)),
        ("http://c.example/e", ["http_proxy": "http://[::1]:3128"], proxy("::1", 3128, from: "http_proxy")),
        // no_proxy: *, names and suffixes with or without a dot, case, final dots, ports, IPs, blocks.
        ("http://c.example/e", ["http_proxy": "p:1", "no_proxy": "*"], .direct),
        ("http://c.example/e", ["http_proxy": "p:1", "no_proxy": " * "], .direct),
        ("http://c.example/e", ["http_proxy": "p:1", "no_proxy": "a.test,*"], proxy("p", 1, from: "http_proxy")),
        ("http://c.example/e", ["http_proxy": "p:1", "no_proxy": "c.example"], .direct),
        ("http://c.example/e", ["http_proxy": "p:1", "NO_PROXY": "c.example"], .direct),
        ("http://c.example/e", ["http_proxy": "p:1", "no_proxy": "other", "NO_PROXY": "c.example"], proxy("p", 1, from: "http_proxy")),
        ("http://a.c.example/e", ["http_proxy": "p:1", "no_proxy": "c.example"], .direct),
        ("http://a.c.example/e", ["http_proxy": "p:1", "no_proxy": ".c.example"], .direct),
        ("http://c.example/e", ["http_proxy": "p:1", "no_proxy": ".c.example"], .direct),
        ("http://bc.example/e", ["http_proxy": "p:1", "no_proxy": "c.example"], proxy("p", 1, from: "http_proxy")),
        ("http://c.example/e", ["http_proxy": "p:1", "no_proxy": "a.c.example"], proxy("p", 1, from: "http_proxy")),
        ("http://C.Example./e", ["http_proxy": "p:1", "no_proxy": " x.test , c.example. "], .direct),
        ("http://c.example:8080/e", ["http_proxy": "p:1", "no_proxy": "c.example:8080"], .direct),
        ("http://c.example:8081/e", ["http_proxy": "p:1", "no_proxy": "c.example:8080"], proxy("p", 1, from: "http_proxy")),
        ("http://c.example/e", ["http_proxy": "p:1", "no_proxy": "c.example:80"], .direct),
        ("https://c.example/e", ["https_proxy": "p:1", "no_proxy": "c.example:443"], .direct),
        ("http://10.1.2.3/e", ["http_proxy": "p:1", "no_proxy": "10.1.2.3"], .direct),
        ("http://10.1.2.3/e", ["http_proxy": "p:1", "no_proxy": "10.0.0.0/8"], .direct),
        ("http://11.1.2.3/e", ["http_proxy": "p:1", "no_proxy": "10.0.0.0/8"], proxy("p", 1, from: "http_proxy")),
        ("http://10.1.2.3/e", ["http_proxy": "p:1", "no_proxy": "10.1.2.0/23"], .direct),
        ("http://10.1.4.3/e", ["http_proxy": "p:1", "no_proxy": "10.1.2.0/23"], proxy("p", 1, from: "http_proxy")),
        ("http://10.1.2.3/e", ["http_proxy": "p:1", "no_proxy": "2.3"], proxy("p", 1, from: "http_proxy")),
        ("http://[::1]:8080/e", ["http_proxy": "p:1", "no_proxy": "::1"], .direct),
        ("http://[::1]:8080/e", ["http_proxy": "p:1", "no_proxy": "[::1]:8080"], .direct),
        ("http://[::1]:8080/e", ["http_proxy": "p:1", "no_proxy": "[::1]:9090"], proxy("p", 1, from: "http_proxy")),
        ("http://[fd00::5]/e", ["http_proxy": "p:1", "no_proxy": "fd00::/8"], .direct),
        ("http://[fe80::5]/e", ["http_proxy": "p:1", "no_proxy": "fd00::/8"], proxy("p", 1, from: "http_proxy")),
        ("http://127.0.0.1/e", ["http_proxy": "p:1", "no_proxy": "localhost"], proxy("p", 1, from: "http_proxy")),
        ("http://localhost/e", ["http_proxy": "p:1", "no_proxy": "localhost,127.0.0.1"], .direct),
    ]

    @Test("every row of the table: which variable, which proxy, which host goes direct", arguments: table.indices)
    func route(row: Int) throws {
        let (url, environment, expected) = Self.table[row]
        #expect(ProxyRoute(for: try #require(URL(string: url)), environment: environment) == expected, "\(url) \(environment)")
    }

    @Test("proxies Beacon does not speak are refused with what to do, credentials hidden", arguments: [
        "socks5://u:secret@p:1080", "socks5h://p", "socks4a://p", "https://u:secret@p:443", "ftp://p:21",
    ])
    func unsupported(value: String) throws {
        let route = ProxyRoute(for: URL(string: "https://c.example/")!, environment: ["all_proxy": value])
        guard case .unsupported(let why) = route else {
            Issue.record("\(value): \(route)")
            return
        }
        #expect(why.contains("all_proxy") && why.contains("urlsession") && !why.contains("secret"), "\(why)")
        let error = try? SocketEndpoint(URL(string: "https://c.example/")!, route: route)
        #expect(error == nil)
    }

    @Test("a proxy is shown without its credentials")
    func shown() {
        let route = ProxyRoute(for: URL(string: "http://c.example/")!, environment: ["http_proxy": "http://u:secret@p:3128"])
        guard case .proxy(let proxy) = route else {
            Issue.record("\(route)")
            return
        }
        #expect(proxy.description == "http://***@p:3128 (from http_proxy)")
    }

    @Test("--transport auto never picks URLSession: Beacon's own client for http and https, proxied or not", arguments: [
        ("http://127.0.0.1:8123/?user=default", [:]), ("HTTP://collector.example/events", [:]), ("https://collector.example/events", [:]),
        ("http://collector.example/events", ["HTTP_PROXY": "http://proxy:3128"]), ("https://collector.example/events", ["HTTPS_PROXY": "http://proxy:3128"]),
        ("http://collector.example/events", ["http_proxy": "http://proxy:3128"]),
        ("https://collector.example/events", ["https_proxy": "http://proxy:3128", "no_proxy": "*"]),
        ("https://collector.example/events", ["all_proxy": "socks5://proxy:1080"]),
    ] as [(String, [String: String])])
    func defaultTransport(url: String, environment: [String: String]) throws {
        #expect(Uploader.defaultTransport(for: try #require(URL(string: url)), environment: environment) is SocketTransport)
    }
}

/// Requests through ``TestProxy``: absolute form for http, CONNECT for https, credentials,
/// refusals, `no_proxy`.
@Suite("Proxies: requests through a proxy", .timeLimit(.minutes(1)))
struct ProxyTransportTests {
    func request(_ url: URL, _ body: String = "[1]") -> TransportRequest {
        TransportRequest(url: url, headers: [("Content-Type", "application/json")], body: Array(body.utf8), timeout: .seconds(60))
    }

    /// A collector answering 200 with the request's head as body.
    func collector() throws -> ScriptedServer {
        try ScriptedServer { connection, _ in
            while let (head, _) = connection.readRequest() { connection.answer(200, head) }
        }
    }

    @Test("http goes to the proxy in absolute form, with Proxy-Authorization from the proxy URL; the collector sees origin form and no proxy credentials")
    func httpThroughProxy() async throws {
        let proxy = try TestProxy(credentials: "u:p@ss")
        defer { proxy.stop() }
        let origin = try collector()
        defer { origin.stop() }
        let transport = SocketTransport(maxResponseBodyBytes: 1 << 20, environment: ["http_proxy": proxy.url(credentials: "u:p%40ss")])
        let url = try #require(URL(string: "http://collector.test:\(origin.port)/events?k=v"))
        for _ in 0..<3 {
            let response = try await transport.send(request(url))
            #expect(response.status == 200)
            let head = String(decoding: response.body, as: UTF8.self)
            #expect(head.hasPrefix("POST /events?k=v HTTP/1.1\r\n") && head.contains("Host: collector.test:\(origin.port)\r\n") && !head.lowercased().contains("proxy-authorization"), "\(head)")
        }
        let seen = proxy.requests
        #expect(seen.count == 3 && seen.allSatisfy { $0.method == "POST" && $0.target == "http://collector.test:\(origin.port)/events?k=v" && $0.proxyAuthorization == "Basic " + Data("u:p@ss".utf8).base64EncodedString() }, "\(seen)")
    }

    @Test("a proxy asking for credentials (407): the answer comes back as 407 for http, and for a CONNECT tunnel with a message naming the proxy, never its password")
    func proxyAuthenticationRequired() async throws {
        let proxy = try TestProxy(credentials: "u:right")
        defer { proxy.stop() }
        let origin = try collector()
        defer { origin.stop() }
        let environment = ["http_proxy": proxy.url(credentials: "u:wrong"), "https_proxy": proxy.url(credentials: "u:wrong")]
        let transport = SocketTransport(maxResponseBodyBytes: 1 << 20, environment: environment)
        let plain = try await transport.send(request(URL(string: "http://collector.test:\(origin.port)/e")!))
        #expect(plain.status == 407)
        let tunnelled = try await transport.send(request(URL(string: "https://collector.test:\(origin.port)/e")!))
        #expect(tunnelled.status == 407)
        let message = String(decoding: tunnelled.body, as: UTF8.self)
        #expect(message.contains("proxy http://***@127.0.0.1:\(proxy.port) (from https_proxy)") && message.contains("CONNECT collector.test:\(origin.port)") && !message.contains("wrong"), "\(message)")
        #expect(AnswerAction(status: tunnelled.status) == .pause)
        #expect(Uploader.hint(407).contains("proxy"))
    }

    @Test("a proxy refusing the tunnel (502) is a network error naming the proxy and the target")
    func tunnelRefused() async throws {
        let proxy = try TestProxy()
        defer { proxy.stop() }
        let nothing = try ScriptedServer.closedPort()
        let transport = SocketTransport(maxResponseBodyBytes: 1 << 20, environment: ["https_proxy": proxy.url()])
        do {
            _ = try await transport.send(request(URL(string: "https://collector.test:\(nothing)/e")!))
            Issue.record("expected a refusal")
        } catch let error as TransportError {
            #expect(error.code == .network && error.message.contains("proxy http://127.0.0.1:\(proxy.port) (from https_proxy) answered 502 to CONNECT collector.test:\(nothing)"), "\(error)")
        }
    }

    @Test("no_proxy sends matching hosts directly: the proxy sees nothing")
    func noProxyBypass() async throws {
        let proxy = try TestProxy()
        defer { proxy.stop() }
        let origin = try collector()
        defer { origin.stop() }
        let transport = SocketTransport(maxResponseBodyBytes: 1 << 20, environment: ["http_proxy": proxy.url(), "no_proxy": "example.com, 127.0.0.1"])
        let response = try await transport.send(request(URL(string: "http://127.0.0.1:\(origin.port)/e")!))
        #expect(response.status == 200 && String(decoding: response.body, as: UTF8.self).hasPrefix("POST /e HTTP/1.1"))
        #expect(proxy.requests.isEmpty)
    }

    @Test("https goes through a CONNECT tunnel, TLS to the collector inside (verified for its own name); requests reuse the tunnel", .enabled(if: TLSTestServer.isAvailable, Comment(rawValue: TLSTestServer.skipReason)))
    func httpsThroughTunnel() async throws {
        let server = try TLSTestServer()
        defer { server.stop() }
        let proxy = try TestProxy(credentials: "u:pw")
        defer { proxy.stop() }
        let transport = SocketTransport(maxResponseBodyBytes: 1 << 20, tls: TLSConfiguration(caFile: server.pki.caFile), environment: ["https_proxy": proxy.url(credentials: "u:pw")])
        for _ in 0..<2 {
            let response = try await transport.send(request(server.url(.good)))
            #expect((200..<300).contains(response.status), "\(response.status)")
        }
        let seen = proxy.requests
        #expect(seen.first?.method == "CONNECT" && seen.first?.target == "localhost:\(server.ports[.good]!)" && seen.first?.proxyAuthorization == "Basic " + Data("u:pw".utf8).base64EncodedString(), "\(seen)")
        // The wrong-host site fails verification through the tunnel just as directly.
        do {
            _ = try await transport.send(request(server.url(.wrongHost)))
            Issue.record("expected a refused certificate")
        } catch let error as TransportError {
            #expect(error.code == .tls, "\(error)")
        }
    }
}
