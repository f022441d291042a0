import Foundation

/// Where a `SocketTransport` (Beacon) sends a URL's requests: host, port, `Host` field, request target
/// and the proxy on the way, worked out once per URL.
package struct SocketEndpoint: Sendable {
    package let url: URL
    /// The host name or address to resolve (an IPv6 address without its brackets).
    let host: String
    let port: UInt16
    /// The `Host` header field's value.
    let hostField: String
    /// The path and query as written in the URL ("/" when empty).
    let target: String
    /// Whether the URL is `https://`.
    package let secure: Bool
    /// The transport's TLS context, for an `https://` URL.
    package var tls: (any TLSProvider)?
    /// `Basic …` from the URL's user info (RFC 7617: user and password percent-decoded, joined
    /// by a colon), sent unless the request has its own `Authorization`. Never shown.
    let authorization: String?
    /// Directly or through a proxy.
    let route: ProxyRoute

    /// The endpoint of `url`, reached by `route` (``ProxyRoute/unsupported(_:)`` throws).
    package init(_ url: URL, route: ProxyRoute = .direct) throws(TransportError) {
        let scheme = url.scheme?.lowercased() ?? ""
        guard scheme == "http" || scheme == "https" else {
            throw TransportError(.network, "\(RedactedURL(url)): SocketTransport needs an http:// or https:// URL")
        }
        secure = scheme == "https"
        guard var host = url.host, !host.isEmpty else {
            throw TransportError(.network, "\(RedactedURL(url)): the URL has no host")
        }
        if host.hasPrefix("["), host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
        let defaultPort = secure ? 443 : 80
        let port = url.port ?? defaultPort
        guard (1...65535).contains(port) else {
            throw TransportError(.network, "\(RedactedURL(url)): port \(port) is out of range")
        }
        self.url = url
        self.host = host
        self.port = UInt16(port)
        let shown = host.contains(":") ? "[\(host)]" : host
        hostField = port == defaultPort ? shown : "\(shown):\(port)"
        authorization = Self.basicAuthorization(of: url)
        if case .unsupported(let reason) = route { throw TransportError(.network, "\(RedactedURL(url)): \(reason)") }
        self.route = route
        // Through a proxy, plain http names the whole URL (absolute form, RFC 9112 §3.2.2).
        let path = Self.target(of: url.absoluteString)
        target = route != .direct && !secure ? "http://\(hostField)\(path)" : path
    }

    /// The proxy that opens a `CONNECT` tunnel to the collector: for `https://` through a proxy.
    var tunnel: ProxyRoute.Proxy? {
        if case .proxy(let proxy) = route, secure { return proxy }
        return nil
    }

    /// Where the TCP connection goes: the proxy's host and port, or the collector's.
    var connectsTo: (host: String, port: UInt16) {
        if case .proxy(let proxy) = route { return (proxy.host, proxy.port) }
        return (host, port)
    }

    /// `Proxy-Authorization` for each request: plain http through a proxy with credentials.
    var proxyAuthorization: String? {
        if case .proxy(let proxy) = route, !secure { return proxy.authorization }
        return nil
    }

    /// What an open connection must have been opened for to carry this endpoint's requests: the
    /// same collector (or the same forwarding proxy), scheme and tunnel.
    var connectionKey: String {
        let (to, at) = connectsTo
        return "\(secure ? "https" : "http") \(to) \(at) \(tunnel.map { _ in "tunnel \(host) \(port)" } ?? "") \(proxyAuthorization ?? "")"
    }

    /// `Basic base64(user:password)` for a URL with user info (as curl and URLSession send it),
    /// nil without.
    static func basicAuthorization(of url: URL) -> String? {
        guard let user = url.user(percentEncoded: false) else { return nil }
        let password = url.password(percentEncoded: false) ?? ""
        return "Basic " + Data("\(user):\(password)".utf8).base64EncodedString()
    }

    /// The path and query of `text` (everything after the authority, up to a fragment), exactly as
    /// written: percent escapes stay escaped.
    static func target(of text: String) -> String {
        var rest = Substring(text)
        if let hash = rest.firstIndex(of: "#") { rest = rest[..<hash] }
        if let separator = rest.range(of: "://") { rest = rest[separator.upperBound...] }
        guard let start = rest.firstIndex(where: { $0 == "/" || $0 == "?" }) else { return "/" }
        let target = rest[start...]
        return target.first == "?" ? "/" + target : String(target)
    }
}
