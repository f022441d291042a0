import Glibc

/// A growable buffer of framed records waiting to be written: the user-space buffer of group commit.
///
/// A class over raw memory rather than `[UInt8]`, so the append path writes frames in place with
/// no copy-on-write or bounds checks, and a chunk's buffer can be handed back for reuse after its
/// bytes are durable. One chunk owns a buffer at a time; it is only touched under the log's state
/// lock (while framing) or writer lock (while writing), hence `@unchecked Sendable`.
///
/// A buffer of ``mappedMinimum`` or more (one that grew for a burst, up to megabytes) is mapped
/// with `mmap(2)` and unmapped with `munmap(2)` by the buffer itself, never through `malloc`: glibc
/// raises its mmap threshold to the size of any mmapped block `free` releases (up to 32 MiB, and
/// the arenas' trim threshold to twice that), after which the process's later large blocks stay
/// in the malloc arenas when freed. One 2.5 MiB burst buffer left a service up to 5 MiB of free
/// memory resident in each arena of the threads that allocate large blocks.
package final class FrameBuffer: @unchecked Sendable {
    package private(set) var base: UnsafeMutableRawPointer
    package private(set) var capacity: Int
    /// Bytes in use, from `base`.
    package var count = 0
    /// `base` was mapped by ``allocate(_:)`` (true) or comes from `malloc` (false).
    package private(set) var isMapped: Bool

    /// glibc's default mmap threshold: blocks from here up are mapped by the buffer itself.
    package static let mappedMinimum = 128 * 1024

    package init(capacity: Int) {
        self.capacity = max(capacity, 64)
        (base, isMapped) = Self.allocate(self.capacity)
    }

    deinit { Self.release(base, capacity: capacity, mapped: isMapped) }

    /// Room for `n` more bytes at the end; the caller writes them and adds `n` to `count`.
    @inline(__always)
    package func tail(reserving n: Int) -> UnsafeMutableRawPointer {
        if count + n > capacity { grow(to: count + n) }
        return base + count
    }

    private func grow(to needed: Int) {
        let newCapacity = max(needed, capacity * 2)
        let (newBase, mapped) = Self.allocate(newCapacity)
        newBase.copyMemory(from: base, byteCount: count)
        Self.release(base, capacity: capacity, mapped: isMapped)
        base = newBase
        capacity = newCapacity
        isMapped = mapped
    }

    /// `capacity` bytes: mapped (`mmap(2)`, anonymous, private) from ``mappedMinimum`` up, from
    /// `malloc` below it or when the mapping fails.
    private static func allocate(_ capacity: Int) -> (UnsafeMutableRawPointer, mapped: Bool) {
        if capacity >= mappedMinimum,
           let mapped = mmap(nil, capacity, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), mapped != MAP_FAILED {
            return (mapped, true)
        }
        return (UnsafeMutableRawPointer.allocate(byteCount: capacity, alignment: 16), false)
    }

    private static func release(_ base: UnsafeMutableRawPointer, capacity: Int, mapped: Bool) {
        if mapped {
            munmap(base, capacity)
        } else {
            base.deallocate()
        }
    }

    /// The bytes in use.
    package var bytes: UnsafeRawBufferPointer { UnsafeRawBufferPointer(start: base, count: count) }
}
