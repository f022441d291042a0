import BeaconHTTP
import BeaconLog

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

    /// ``body(_:sentAt:)`` for records read from the log (slices of its read buffer): written once
    /// at its size, each record with one `memcpy`, into an array, or from glibc's mmap threshold up
    /// into memory the body maps itself (a `FrameBuffer`: see ``RequestBody`` for why a large body
    /// is never an array).
    func body(records: [ArraySlice<UInt8>], sentAt: Int64) -> RequestBody {
        let (prefix, separator, suffix): ([UInt8], UInt8, [UInt8]) = switch self {
        case .jsonArray: ([UInt8(ascii: "[")], UInt8(ascii: ","), [UInt8(ascii: "]")])
        case .envelope: (Array(#"{"sent_at":\#(sentAt),"batch":["#.utf8), UInt8(ascii: ","), Array("]}".utf8))
        case .ndjson: ([], 0x0A, records.isEmpty ? [] : [0x0A])
        }
        var size = prefix.count + suffix.count + max(0, records.count - 1)
        for record in records { size += record.count }
        return .written(capacity: size) { base in
            var at = 0
            func put(_ bytes: [UInt8]) {
                bytes.withUnsafeBytes { if $0.count > 0 { (base + at).copyMemory(from: $0.baseAddress!, byteCount: $0.count) } }
                at += bytes.count
            }
            put(prefix)
            // Each record's bytes found through the slice's base address: `withUnsafeBufferPointer`
            // retains and releases the slice's storage around each call (its `_fixLifetime`), two
            // atomic operations per record. `records` keeps every storage alive meanwhile.
            for i in records.indices {
                if i > 0 {
                    base.storeBytes(of: separator, toByteOffset: at, as: UInt8.self)
                    at += 1
                }
                let count = records[i].count
                if count > 0, let source = records[i]._baseAddressIfContiguous { (base + at).copyMemory(from: source, byteCount: count) }
                at += count
            }
            put(suffix)
            precondition(at == size, "Invalid state: a body of \(size) bytes got \(at)")
            return at
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
