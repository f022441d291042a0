// The public types of Beacon's API that are declared in the targets below it, re-exported so that
// `import Beacon` is all a program writes (as Hummingbird re-exports HummingbirdCore's): the
// request, answer and error of a `Transport` and the header fields (BeaconHTTP), and the TLS
// settings of `SocketTransport` (BeaconTLS).
@_exported import struct BeaconHTTP.HTTPHeaders
@_exported import struct BeaconHTTP.RedactedURL
@_exported import struct BeaconHTTP.TransportError
@_exported import struct BeaconHTTP.TransportRequest
@_exported import struct BeaconHTTP.TransportResponse
@_exported import struct BeaconTLS.TLSConfiguration
