import CZlib

/// gzip compression and decompression through the system zlib (`deflateInit2` / `inflateInit2`
/// with a gzip wrapper, window bits 31 / 47).
package enum Gzip {
    /// A gzip member holding `bytes`, compressed at `level` (0…9, default 6).
    package static func compress(_ bytes: [UInt8], level: Int32 = 6) -> [UInt8] {
        var output = [UInt8](repeating: 0, count: bound(bytes.count))
        let produced = bytes.withUnsafeBytes { input in
            output.withUnsafeMutableBytes { compress(input, into: $0, level: level) }
        }
        output.removeSubrange(produced...)
        return output
    }

    /// At least as many bytes as ``compress(_:into:level:)`` writes for `count` bytes at any level:
    /// above zlib's bound for a stream whose parameters it does not know (`deflateBound` of an
    /// uninitialised stream: fixed blocks, an eighth, a 256th and a 512th more and 4 bytes), with
    /// the gzip wrapper's 18. Computed, not asked of a `deflateInit2` of its own: each costs a
    /// quarter megabyte of state (`compress` checks against zlib's own bound).
    package static func bound(_ count: Int) -> Int {
        count + (count + 7) / 8 + (count + 63) / 64 + 64
    }

    /// Writes a gzip member holding `input` to `output` (at least ``bound(_:)`` bytes), compressed
    /// at `level`; returns how many bytes it wrote.
    package static func compress(_ input: UnsafeRawBufferPointer, into output: UnsafeMutableRawBufferPointer, level: Int32 = 6) -> Int {
        var stream = z_stream()
        var status = deflateInit2_(&stream, level, Z_DEFLATED, 31, 8, Z_DEFAULT_STRATEGY, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size))
        precondition(status == Z_OK, "deflateInit2 failed (\(status)): zlib is unusable")
        defer { deflateEnd(&stream) }
        precondition(output.count >= Int(deflateBound(&stream, uLong(input.count))), "compress: the output is smaller than deflateBound")
        stream.next_in = UnsafeMutablePointer(mutating: input.baseAddress?.assumingMemoryBound(to: UInt8.self))
        stream.avail_in = uInt(input.count)
        stream.next_out = output.baseAddress?.assumingMemoryBound(to: UInt8.self)
        stream.avail_out = uInt(output.count)
        status = deflate(&stream, Z_FINISH)
        precondition(status == Z_STREAM_END, "deflate did not finish within deflateBound (\(status))")
        return output.count - Int(stream.avail_out)
    }

    /// The bytes inside one or more concatenated gzip (or zlib) members. Throws on damaged input
    /// or once the result would exceed `limit` bytes (``GzipError/exceedsLimit``): no more than
    /// `limit` bytes are ever held, so a small body that inflates to gigabytes (a zip bomb) costs
    /// `limit` at most.
    package static func decompress(_ bytes: [UInt8], limit: Int = 256 << 20) throws(GzipError) -> [UInt8] {
        var stream = z_stream()
        guard inflateInit2_(&stream, 47, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size)) == Z_OK else {
            throw GzipError(message: "inflateInit2 failed")
        }
        defer { inflateEnd(&stream) }
        var output: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        try bytes.withUnsafeBufferPointer { input throws(GzipError) in
            stream.next_in = UnsafeMutablePointer(mutating: input.baseAddress)
            stream.avail_in = uInt(input.count)
            while true {
                let (status, produced) = chunk.withUnsafeMutableBufferPointer { out -> (Int32, Int) in
                    stream.next_out = out.baseAddress
                    stream.avail_out = uInt(out.count)
                    let status = inflate(&stream, Z_NO_FLUSH)
                    return (status, out.count - Int(stream.avail_out))
                }
                guard produced <= limit - output.count else {
                    throw GzipError(message: "the gzip body inflates to more than \(limit) bytes", exceedsLimit: true)
                }
                if output.count + produced > output.capacity {
                    // Grow by doubling, but never past the limit.
                    output.reserveCapacity(min(limit, max(output.capacity * 2, output.count + produced)))
                }
                output.append(contentsOf: chunk[0..<produced])
                if status == Z_STREAM_END {
                    if stream.avail_in == 0 { return }
                    // Another member follows.
                    guard inflateReset(&stream) == Z_OK else { throw GzipError(message: "inflateReset failed") }
                    continue
                }
                guard status == Z_OK || (status == Z_BUF_ERROR && produced > 0) else {
                    throw GzipError(message: "the gzip body is damaged or truncated (zlib status \(status))")
                }
            }
        }
        return output
    }
}

/// A gzip body that could not be decompressed.
package struct GzipError: Error, Sendable, CustomStringConvertible {
    package var message: String
    /// The body is intact so far but inflates to more than the limit.
    package var exceedsLimit: Bool
    package var description: String { "gzip: \(message)" }

    package init(message: String, exceedsLimit: Bool = false) {
        self.message = message
        self.exceedsLimit = exceedsLimit
    }
}
