import Foundation

extension Uploader {
    /// The transport used when none is given: ``SocketTransport`` (Beacon's own HTTP/1.1 client)
    /// for a plain `http://` collector reached directly, ``HTTPTransport`` (`URLSession`) for
    /// `https://` and whenever the environment names a proxy.
    ///
    /// `URLSession` on Linux keeps about 150 bytes of every request for good (FoundationNetworking
    /// never frees a libcurl URL handle it allocates per request) and costs several times the CPU
    /// per request, so a long-running tracker grows by megabytes a minute with it. Beacon's client
    /// speaks plain HTTP only and ignores proxies: `http_proxy`, `HTTP_PROXY`, `all_proxy` or
    /// `ALL_PROXY` set and non-empty (which libcurl may honour) keeps `URLSession`, without
    /// weighing `no_proxy`.
    ///
    /// ```swift
    /// let transport = Uploader.defaultTransport(for: URL(string: "http://127.0.0.1:8123/")!)
    /// ```
    public static func defaultTransport(for url: URL, environment: [String: String] = ProcessInfo.processInfo.environment) -> any Transport {
        let proxied = ["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"].contains { !(environment[$0] ?? "").isEmpty }
        guard url.scheme?.lowercased() == "http", !proxied else { return HTTPTransport() }
        return SocketTransport()
    }
}
