import Glibc

/// Finding a byte sequence in bytes, with `memchr` for the first byte.
enum ByteSearch {
    /// True if `needle` occurs in `haystack` (an empty needle occurs everywhere).
    static func contains(_ haystack: [UInt8], _ needle: [UInt8]) -> Bool {
        guard !needle.isEmpty, haystack.count >= needle.count else { return needle.isEmpty }
        return firstIndex(of: needle, in: haystack[...]) != nil
    }

    /// The index in `haystack`'s base of the first occurrence of `needle`.
    static func firstIndex(of needle: [UInt8], in haystack: ArraySlice<UInt8>) -> Int? {
        guard let first = needle.first, haystack.count >= needle.count else { return nil }
        return haystack.withUnsafeBufferPointer { h -> Int? in
            let last = h.count - needle.count
            var i = 0
            while i <= last {
                guard let p = memchr(h.baseAddress! + i, Int32(first), last - i + 1) else { return nil }
                i = h.baseAddress!.distance(to: p.assumingMemoryBound(to: UInt8.self))
                var match = true
                for k in 1..<needle.count where h[i + k] != needle[k] { match = false; break }
                if match { return haystack.startIndex + i }
                i += 1
            }
            return nil
        }
    }
}
