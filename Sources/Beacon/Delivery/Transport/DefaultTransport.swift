import Foundation

extension Uploader {
    /// The transport used when none is given: ``SocketTransport`` (Beacon's own HTTP/1.1 client,
    /// TLS through the system's OpenSSL) for an `http://` or `https://` collector reached
    /// directly, ``HTTPTransport`` (`URLSession`) whenever the environment names a proxy.
    ///
    /// `URLSession` on Linux keeps about 150 bytes of every request for good (FoundationNetworking
    /// never frees a libcurl URL handle it allocates per request) and costs several times the CPU
    /// per request, so a long-running tracker grows by megabytes a minute with it. Beacon's client
    /// ignores proxies: the proxy variable of the URL's scheme (`http_proxy` or `https_proxy`, in
    /// either case) or `all_proxy` set and non-empty (which libcurl may honour) keeps `URLSession`,
    /// without weighing `no_proxy`.
    ///
    /// ```swift
    /// let transport = Uploader.defaultTransport(for: URL(string: "http://127.0.0.1:8123/")!)
    /// ```
    public static func defaultTransport(for url: URL, environment: [String: String] = ProcessInfo.processInfo.environment) -> any Transport {
        let scheme = url.scheme?.lowercased() ?? ""
        let proxied = ["\(scheme)_proxy", "\(scheme.uppercased())_PROXY", "all_proxy", "ALL_PROXY"].contains { !(environment[$0] ?? "").isEmpty }
        guard scheme == "http" || scheme == "https", !proxied else { return HTTPTransport() }
        return SocketTransport()
    }
}
