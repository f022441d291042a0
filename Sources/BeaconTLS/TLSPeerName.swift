import Glibc

/// The name a TLS connection checks the server's certificate against, and whether it is sent as
/// SNI: a host name is (and must match a DNS subject alternative name); an IP address literal is
/// not (RFC 6066 §3) and must match an IP subject alternative name.
enum TLSPeerName: Equatable, Sendable {
    /// A host name, lower case, without a trailing dot.
    case dns(String)
    /// An IPv4 or IPv6 address literal, without brackets or zone.
    case ip(String)

    /// The name for `host` as it stands in a URL (an IPv6 address with or without brackets).
    init(host: String) {
        var name = Substring(host)
        if name.hasPrefix("["), name.hasSuffix("]") { name = name.dropFirst().dropLast() }
        var address = in6_addr()
        if inet_pton(AF_INET, String(name), &address) == 1 {
            self = .ip(String(name))
            return
        }
        if name.contains(":") {
            let withoutZone = name.split(separator: "%", maxSplits: 1, omittingEmptySubsequences: false)[0]
            if inet_pton(AF_INET6, String(withoutZone), &address) == 1 {
                self = .ip(String(withoutZone))
                return
            }
        }
        if name.hasSuffix("."), name.count > 1 { name = name.dropLast() }
        self = .dns(name.lowercased())
    }

    /// The SNI value: the host name, or nil for an address.
    var serverName: String? {
        if case .dns(let name) = self { return name }
        return nil
    }
}
