/// A growable buffer of framed records waiting to be written: the user-space buffer of group commit.
///
/// A class over raw memory rather than `[UInt8]`, so the append path writes frames in place with
/// no copy-on-write or bounds checks, and a chunk's buffer can be handed back for reuse after its
/// bytes are durable. One chunk owns a buffer at a time; it is only touched under the log's state
/// lock (while framing) or writer lock (while writing), hence `@unchecked Sendable`.
final class FrameBuffer: @unchecked Sendable {
    private(set) var base: UnsafeMutableRawPointer
    private(set) var capacity: Int
    /// Bytes in use, from `base`.
    var count = 0

    init(capacity: Int) {
        self.capacity = max(capacity, 64)
        base = UnsafeMutableRawPointer.allocate(byteCount: self.capacity, alignment: 16)
    }

    deinit { base.deallocate() }

    /// Room for `n` more bytes at the end; the caller writes them and adds `n` to `count`.
    @inline(__always)
    func tail(reserving n: Int) -> UnsafeMutableRawPointer {
        if count + n > capacity { grow(to: count + n) }
        return base + count
    }

    private func grow(to needed: Int) {
        let newCapacity = max(needed, capacity * 2)
        let newBase = UnsafeMutableRawPointer.allocate(byteCount: newCapacity, alignment: 16)
        newBase.copyMemory(from: base, byteCount: count)
        base.deallocate()
        base = newBase
        capacity = newCapacity
    }

    /// The bytes in use.
    var bytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: base, count: count) }
}
