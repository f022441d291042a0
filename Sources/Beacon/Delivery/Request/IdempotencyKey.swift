/// The deterministic idempotency key of a request: the sequence numbers of its first and last
/// events and a 64-bit FNV-1a hash of their sequence numbers and bytes. The same events give the
/// same key in every attempt and after restarts.
enum IdempotencyKey {
    static func make(records: some Collection<ArraySlice<UInt8>>, seqs: some Collection<UInt64>) -> String {
        var hash: UInt64 = 0xcbf2_9ce4_8422_2325
        let prime: UInt64 = 0x0000_0100_0000_01b3
        for seq in seqs {
            var s = seq
            for _ in 0..<8 { hash = (hash ^ (s & 0xff)) &* prime; s >>= 8 }
        }
        for record in records {
            record.withUnsafeBufferPointer { buffer in
                for byte in buffer { hash = (hash ^ UInt64(byte)) &* prime }
            }
            hash = (hash ^ 0x0A) &* prime
        }
        let hex = String(hash, radix: 16)
        return "\(seqs.first ?? 0)-\(seqs.reversed().first ?? 0)-" + String(repeating: "0", count: 16 - hex.count) + hex
    }
}
