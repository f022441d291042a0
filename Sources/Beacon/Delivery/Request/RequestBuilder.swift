/// Builds the upload requests: the body in the configured format (gzipped when asked), and the
/// header fields every request carries.
///
/// Headers, in order: `Content-Type`, `User-Agent: beacon-swift/<version>`, `X-Beacon-Sent-At`
/// (epoch ms, per attempt), `Idempotency-Key` (from the events' seqs and bytes: the same events
/// give the same key in every attempt and after restarts), `X-Beacon-Retry` (earlier sends of the
/// same events), `Content-Encoding: gzip` when compressing, then the configured headers sorted by
/// name. Header values are never logged.
struct RequestBuilder: Sendable {
    let configuration: DeliveryConfiguration
    private let extraHeaders: [(name: String, value: String)]

    init(configuration: DeliveryConfiguration) {
        self.configuration = configuration
        self.extraHeaders = configuration.headers.sorted { $0.key < $1.key }.map { (name: $0.key, value: $0.value) }
    }

    /// The request for `records` (with their `seqs`), sent at `sentAt` (epoch ms) after `retry`
    /// earlier sends of the same events, with `timeout`.
    func request(records: [ArraySlice<UInt8>], seqs: [UInt64], sentAt: Int64, retry: Int, timeout: Duration) -> TransportRequest {
        var body = configuration.format.body(records, sentAt: sentAt)
        var headers: [(name: String, value: String)] = [
            ("Content-Type", configuration.format.contentType),
            ("User-Agent", "beacon-swift/\(Uploader.version)"),
            ("X-Beacon-Sent-At", String(sentAt)),
            ("Idempotency-Key", IdempotencyKey.make(records: records, seqs: seqs)),
            ("X-Beacon-Retry", String(retry)),
        ]
        if configuration.gzip {
            body = Gzip.compress(body)
            headers.append(("Content-Encoding", "gzip"))
        }
        headers.append(contentsOf: extraHeaders)
        return TransportRequest(url: configuration.url, headers: headers, body: body, timeout: timeout)
    }
}
