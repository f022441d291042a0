import BeaconLog

/// The deterministic idempotency key of a request: the sequence numbers of its first and last
/// events and a 64-bit hash of their sequence numbers, CRC-32Cs and lengths. The same events give
/// the same key in every attempt and after restarts.
///
/// The bytes are not passed over for it: a read checks every record's CRC-32C anyway (with the
/// CPU's instruction) and hands it over in ``LogBatch/crcs``; only records without one (a batch
/// not read from a log) are checksummed here. Any one- or two-bit change of a record changes its
/// CRC-32C, and so the key.
enum IdempotencyKey {
    static func make(records: [ArraySlice<UInt8>], seqs: [UInt64], crcs: [UInt32] = []) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        let known = crcs.count == records.count
        for i in records.indices {
            let crc = known ? crcs[i] : records[i].withUnsafeBytes { CRC32C.checksum($0) }
            hash = mix(hash, seqs[i])
            hash = mix(hash, UInt64(crc) | UInt64(records[i].count) << 32)
        }
        let hex = String(hash, radix: 16)
        return "\(seqs.first ?? 0)-\(seqs.last ?? 0)-" + String(repeating: "0", count: 16 - hex.count) + hex
    }

    @inline(__always)
    private static func mix(_ hash: UInt64, _ word: UInt64) -> UInt64 {
        let x = (hash ^ word) &* 0x9E37_79B9_7F4A_7C15
        return x ^ (x >> 29)
    }
}
