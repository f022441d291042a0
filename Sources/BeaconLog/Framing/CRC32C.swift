import CBeaconCRC
import Glibc

/// CRC-32C (Castagnoli, reflected polynomial 0x82F63B78): the CPU's instruction where there is one
/// (SSE4.2, AArch64 CRC), else slicing-by-8 in Swift.
///
/// `CRC32C.checksum(Array("123456789".utf8)) == 0xE3069283`.
package enum CRC32C {
    /// Eight 256-entry tables, flattened: table k starts at k * 256.
    private static let table: [UInt32] = {
        var t = [UInt32](repeating: 0, count: 8 * 256)
        for i in 0..<256 {
            var c = UInt32(i)
            for _ in 0..<8 { c = (c & 1) != 0 ? (c >> 1) ^ 0x82F6_3B78 : c >> 1 }
            t[i] = c
        }
        for k in 1..<8 {
            for i in 0..<256 {
                let previous = t[(k - 1) * 256 + i]
                t[k * 256 + i] = (previous >> 8) ^ t[Int(previous & 0xFF)]
            }
        }
        return t
    }()

    /// The CRC-32C of `bytes`.
    package static func checksum(_ bytes: UnsafeRawBufferPointer) -> UInt32 {
        update(0, bytes)
    }

    /// The CRC-32C of any byte sequence.
    package static func checksum<S: Sequence<UInt8>>(_ bytes: S) -> UInt32 {
        if let crc = bytes.withContiguousStorageIfAvailable({ update(0, UnsafeRawBufferPointer($0)) }) {
            return crc
        }
        let copy = Array(bytes)
        return copy.withUnsafeBytes { update(0, $0) }
    }

    /// The CRC-32C of `bytes` if they hold no raw newline (one record's line), else nil: the
    /// append path's check and checksum in one pass over the record.
    @inline(__always)
    package static func checksum(ofLine bytes: UnsafeRawBufferPointer) -> UInt32? {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return 0 }
        if hardware {
            var newline: Int32 = 0
            let crc = beacon_crc32c_hw_scan(0, base, bytes.count, &newline)
            return newline == 0 ? crc : nil
        }
        if memchr(base, 0x0A, bytes.count) != nil { return nil }
        return software(0, bytes)
    }

    /// Whether the CPU computes CRC-32C (checked once).
    package static let hardware = beacon_crc32c_hw_available() != 0

    /// Continues a CRC-32C over more bytes: `update(checksum(a), b) == checksum(a + b)`.
    @inline(__always)
    package static func update(_ crc: UInt32, _ bytes: UnsafeRawBufferPointer) -> UInt32 {
        guard let base = bytes.baseAddress, bytes.count > 0 else { return crc }
        if hardware { return beacon_crc32c_hw(crc, base, bytes.count) }
        return software(crc, bytes)
    }

    /// The table-driven version: the fallback, and what tests compare the instruction with.
    package static func software(_ crc: UInt32, _ bytes: UnsafeRawBufferPointer) -> UInt32 {
        guard var p = bytes.baseAddress, bytes.count > 0 else { return crc }
        var n = bytes.count
        var c = ~crc
        table.withUnsafeBufferPointer { t in
            while n >= 8 {
                let word = UInt64(littleEndian: p.loadUnaligned(as: UInt64.self))
                let lo = UInt32(truncatingIfNeeded: word) ^ c
                let hi = UInt32(truncatingIfNeeded: word >> 32)
                c = t[7 * 256 + Int(lo & 0xFF)] ^ t[6 * 256 + Int((lo >> 8) & 0xFF)]
                    ^ t[5 * 256 + Int((lo >> 16) & 0xFF)] ^ t[4 * 256 + Int(lo >> 24)]
                    ^ t[3 * 256 + Int(hi & 0xFF)] ^ t[2 * 256 + Int((hi >> 8) & 0xFF)]
                    ^ t[1 * 256 + Int((hi >> 16) & 0xFF)] ^ t[Int(hi >> 24)]
                p += 8
                n -= 8
            }
            while n > 0 {
                c = t[Int((c ^ UInt32(p.load(as: UInt8.self))) & 0xFF)] ^ (c >> 8)
                p += 1
                n -= 1
            }
        }
        return ~c
    }
}
