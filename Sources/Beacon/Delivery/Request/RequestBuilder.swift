import BeaconHTTP
import BeaconLog

/// Builds the upload requests: the body in the configured format (gzipped when asked), and the
/// header fields every request carries.
///
/// Headers, in order: `Content-Type`, `User-Agent: beacon-swift/<version>`, `X-Beacon-Sent-At`
/// (epoch ms, per attempt), `Idempotency-Key` (from the events' seqs and bytes: the same events
/// give the same key in every attempt and after restarts), `X-Beacon-Retry` (earlier sends of the
/// same events), `Content-Encoding: gzip` when compressing, then the configured headers in their
/// order. Header values are never logged.
struct RequestBuilder: Sendable {
    let configuration: DeliveryConfiguration
    private let userAgent = "beacon-swift/\(Uploader.version)"

    init(configuration: DeliveryConfiguration) {
        self.configuration = configuration
    }

    /// What a request's events make of it, the same in every attempt: the body as sent (gzipped
    /// when asked) and the idempotency key. Built ahead of time, while an earlier request is in
    /// flight, so that sending costs no more than the headers.
    struct Payload: Sendable {
        /// The body as sent; nil for ``PayloadFormat/envelope``, whose `sent_at` changes per attempt.
        var body: RequestBody?
        var key: String
    }

    /// The payload of a request carrying `records` (with their `seqs` and, when the read gave
    /// them, `crcs`).
    func payload(records: [ArraySlice<UInt8>], seqs: [UInt64], crcs: [UInt32] = []) -> Payload {
        let key = IdempotencyKey.make(records: records, seqs: seqs, crcs: crcs)
        guard configuration.format != .envelope else { return Payload(body: nil, key: key) }
        return Payload(body: encoded(configuration.format.body(records: records, sentAt: 0)), key: key)
    }

    /// The request for `records` (with their `seqs`), sent at `sentAt` (epoch ms) after `retry`
    /// earlier sends of the same events, with `timeout`; `payload` is theirs when it was built
    /// ahead.
    func request(records: [ArraySlice<UInt8>], seqs: [UInt64], crcs: [UInt32] = [], payload: Payload? = nil, sentAt: Int64, retry: Int, timeout: Duration) -> TransportRequest {
        let payload = payload ?? Payload(body: nil, key: IdempotencyKey.make(records: records, seqs: seqs, crcs: crcs))
        let body = payload.body ?? encoded(configuration.format.body(records: records, sentAt: sentAt))
        var headers: HTTPHeaders = [
            ("Content-Type", configuration.format.contentType),
            ("User-Agent", userAgent),
            ("X-Beacon-Sent-At", String(sentAt)),
            ("Idempotency-Key", payload.key),
            ("X-Beacon-Retry", String(retry)),
        ]
        if configuration.gzip { headers.add(name: "Content-Encoding", value: "gzip") }
        for field in configuration.headers { headers.add(name: field.name, value: field.value) }
        return TransportRequest(url: configuration.url, headers: headers, content: body, timeout: timeout)
    }

    /// `body` as sent: gzipped when asked, into memory mapped by the buffer itself when zlib's bound
    /// for it reaches glibc's mmap threshold (see ``RequestBody``).
    private func encoded(_ body: RequestBody) -> RequestBody {
        guard configuration.gzip else { return body }
        return body.withUnsafeBytes { input in
            let bound = Gzip.bound(input.count)
            return .written(capacity: bound) { Gzip.compress(input, into: UnsafeMutableRawBufferPointer(start: $0, count: bound)) }
        }
    }
}

extension RequestBody {
    /// A body of at most `capacity` bytes that `write` puts at the pointer it gets (returning how
    /// many it wrote): in an array, or, from glibc's mmap threshold up, in memory a `FrameBuffer`
    /// maps itself (see ``RequestBody`` for why a large body is never an array). Every body the
    /// uploader builds (the format's, gzip's) is made here.
    static func written(capacity: Int, _ write: (UnsafeMutableRawPointer) -> Int) -> RequestBody {
        guard capacity > 0 else { return .bytes([]) }
        if capacity >= FrameBuffer.mappedMinimum {
            let buffer = FrameBuffer(capacity: capacity)
            buffer.count = write(buffer.tail(reserving: capacity))
            return .mapped(buffer)
        }
        return .bytes([UInt8](unsafeUninitializedCapacity: capacity) { buffer, initialized in
            initialized = write(UnsafeMutableRawPointer(buffer.baseAddress!))
        })
    }
}

/// A large request body's memory: mapped and unmapped by the buffer itself.
extension FrameBuffer: MappedBytes {}
