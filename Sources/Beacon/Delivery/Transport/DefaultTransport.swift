import Foundation

extension Uploader {
    /// The transport used when none is given: ``SocketTransport``, Beacon's own HTTP/1.1 client
    /// (TLS through the system's OpenSSL), for `http://` and `https://`, directly or through the
    /// proxy the environment names (`http_proxy`, `https_proxy`, `all_proxy`, `no_proxy`, read
    /// as curl reads them). `HTTPTransport` (`URLSession`, product `BeaconURLSession`) is used only when chosen explicitly.
    ///
    /// `URLSession` on Linux keeps about 150 bytes of every request for good (FoundationNetworking
    /// never frees a libcurl URL handle it allocates per request) and costs several times the CPU
    /// per request, so a long-running tracker grows by megabytes a minute with it. A SOCKS or
    /// `https://` proxy, which Beacon's client does not speak, makes requests fail with a message
    /// saying so (choose `HTTPTransport` for those).
    ///
    /// ```swift
    /// let transport = Uploader.defaultTransport(for: URL(string: "http://127.0.0.1:8123/")!)
    /// ```
    public static func defaultTransport(for url: URL, environment: [String: String] = ProcessInfo.processInfo.environment) -> any Transport {
        SocketTransport(maxResponseBodyBytes: 1 << 20, environment: environment)
    }
}
