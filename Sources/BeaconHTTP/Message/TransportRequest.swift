import Foundation

/// One HTTP request the uploader asks a `Transport` (Beacon) to send: a POST of `body` with `headers`.
public struct TransportRequest: Sendable {
    /// Where to send it.
    public var url: URL
    /// The HTTP method. The uploader always uses `POST`.
    public var method: String
    /// Header fields in the order they are sent. May hold secrets (`Authorization`): never log them.
    public var headers: HTTPHeaders
    /// The request body, already encoded (and compressed, when `Content-Encoding: gzip` is set).
    public var body: [UInt8] {
        get { content.array }
        set { content = .bytes(newValue) }
    }
    /// How long the transport may take before it gives up with ``TransportError/Code/timeout``.
    public var timeout: Duration
    /// The body as the uploader built it: a large one in memory it mapped itself (see
    /// ``RequestBody``), which ``body`` copies into an array and the socket transport sends as it is.
    package var content: RequestBody

    /// A request to `url`: a POST of `body` by default, given up after `timeout`.
    public init(url: URL, method: String = "POST", headers: HTTPHeaders = [:], body: [UInt8], timeout: Duration = .seconds(30)) {
        self.init(url: url, method: method, headers: headers, content: .bytes(body), timeout: timeout)
    }

    package init(url: URL, method: String = "POST", headers: HTTPHeaders = [:], content: RequestBody, timeout: Duration = .seconds(30)) {
        self.url = url
        self.method = method
        self.headers = headers
        self.content = content
        self.timeout = timeout
    }
}

/// Bytes in memory their owner maps and unmaps itself (BeaconLog's `FrameBuffer`), alive as long
/// as the object.
package protocol MappedBytes: AnyObject, Sendable {
    var bytes: UnsafeRawBufferPointer { get }
}

/// A request body: an array, or, from glibc's mmap threshold (128 KiB) up, memory mapped by its
/// owner. An array's storage comes from `malloc`, and `free` of a block `malloc` had mapped raises
/// glibc's mmap threshold to its size (up to 32 MiB, the arenas' trim threshold to twice that):
/// one catch-up body of 1 MiB freed left every later block under 1 MiB of the whole process (the
/// host service's too) in the malloc arenas, and up to 2 MiB of free memory resident in each
/// (issue 29: +14 MiB of RSS in a service after 1M events).
package enum RequestBody: Sendable {
    case bytes([UInt8])
    case mapped(any MappedBytes)

    package var count: Int {
        switch self {
        case .bytes(let bytes): bytes.count
        case .mapped(let mapped): mapped.bytes.count
        }
    }

    /// The bytes, valid inside `body` only.
    package func withUnsafeBytes<R>(_ body: (UnsafeRawBufferPointer) throws -> R) rethrows -> R {
        switch self {
        case .bytes(let bytes): try bytes.withUnsafeBytes(body)
        case .mapped(let mapped): try withExtendedLifetime(mapped) { try body(mapped.bytes) }
        }
    }

    /// The bytes in an array (a copy of mapped ones).
    package var array: [UInt8] {
        switch self {
        case .bytes(let bytes): bytes
        case .mapped(let mapped): Array(mapped.bytes)
        }
    }
}
