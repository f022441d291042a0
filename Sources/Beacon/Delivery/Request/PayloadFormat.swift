/// How a batch of events is put in a request body. Bodies are the stored event bytes joined,
/// never parsed or re-encoded.
public enum PayloadFormat: String, Sendable, CaseIterable {
    /// `[e1,e2,…]`, `Content-Type: application/json`: what collectors of this record format take. The default.
    case jsonArray
    /// `{"sent_at":<epoch ms>,"batch":[e1,e2,…]}`, `Content-Type: application/json`. `sent_at` is
    /// stamped per attempt, so a retried body differs in that field only.
    case envelope
    /// One event per line, each ending in `\n`, `Content-Type: application/x-ndjson` (the HTTP
    /// inputs of Vector, Fluent Bit and Logstash).
    case ndjson

    /// The `Content-Type` header value.
    public var contentType: String {
        switch self {
        case .jsonArray, .envelope: "application/json"
        case .ndjson: "application/x-ndjson"
        }
    }

    /// The body for `records` (each the bytes of one JSON value), sent at `sentAt` (epoch ms,
    /// used by ``envelope`` only).
    public func body<C: Collection<UInt8>>(_ records: some Collection<C>, sentAt: Int64) -> [UInt8] {
        var size = 2
        for record in records { size += record.count + 1 }
        var body: [UInt8] = []
        body.reserveCapacity(size + 40)
        switch self {
        case .jsonArray:
            body.append(UInt8(ascii: "["))
            appendJoined(records, into: &body)
            body.append(UInt8(ascii: "]"))
        case .envelope:
            body.append(contentsOf: #"{"sent_at":"#.utf8)
            body.append(contentsOf: String(sentAt).utf8)
            body.append(contentsOf: #","batch":["#.utf8)
            appendJoined(records, into: &body)
            body.append(contentsOf: "]}".utf8)
        case .ndjson:
            for record in records {
                body.append(contentsOf: record)
                body.append(0x0A)
            }
        }
        return body
    }

    /// ``body(_:sentAt:)`` for records read from the log (slices of its read buffer): the body
    /// allocated once at its size and each record copied with one `memcpy`.
    func body(records: [ArraySlice<UInt8>], sentAt: Int64) -> [UInt8] {
        guard self == .jsonArray else { return body(records, sentAt: sentAt) }
        var size = 2 + max(0, records.count - 1)
        for record in records { size += record.count }
        return [UInt8](unsafeUninitializedCapacity: size) { buffer, initialized in
            let base = buffer.baseAddress!
            base[0] = UInt8(ascii: "[")
            var at = 1
            // Each record's bytes found through the slice's base address: `withUnsafeBufferPointer`
            // retains and releases the slice's storage around each call (its `_fixLifetime`), two
            // atomic operations per record. `records` keeps every storage alive meanwhile.
            for i in records.indices {
                if i > 0 {
                    base[at] = UInt8(ascii: ",")
                    at += 1
                }
                let count = records[i].count
                if count > 0, let source = records[i]._baseAddressIfContiguous { (base + at).update(from: source, count: count) }
                at += count
            }
            base[at] = UInt8(ascii: "]")
            initialized = at + 1
        }
    }

    private func appendJoined<C: Collection<UInt8>>(_ records: some Collection<C>, into body: inout [UInt8]) {
        var first = true
        for record in records {
            if !first { body.append(UInt8(ascii: ",")) }
            first = false
            body.append(contentsOf: record)
        }
    }
}
