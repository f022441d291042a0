import Glibc

/// A growable byte buffer written through a raw pointer: the encoder's output.
///
/// It starts in a caller-provided buffer (a stack allocation: ``withWriter(_:)``) and moves to the
/// heap only when a record outgrows it, so encoding a typical event allocates nothing until its
/// exact-size `[UInt8]` is made. Internal and unsafe by design: copy it only inside
/// ``withWriter(_:)``, which releases its heap storage.
struct ByteWriter {
    /// The stack buffer's size: events up to this size never touch the heap while encoding.
    static let stackCapacity = 1024

    private(set) var base: UnsafeMutablePointer<UInt8>
    private(set) var count = 0
    private var capacity: Int
    private var onHeap = false

    private init(buffer: UnsafeMutableBufferPointer<UInt8>) {
        base = buffer.baseAddress!
        capacity = buffer.count
    }

    /// Runs `body` with an empty writer and releases the writer's memory afterwards.
    static func withWriter<R>(_ body: (inout ByteWriter) throws -> R) rethrows -> R {
        try withUnsafeTemporaryAllocation(of: UInt8.self, capacity: stackCapacity) { buffer in
            var writer = ByteWriter(buffer: buffer)
            defer { if writer.onHeap { writer.base.deallocate() } }
            return try body(&writer)
        }
    }

    /// The bytes written, as an exact-size array.
    func makeArray() -> [UInt8] {
        [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
            if count > 0 { memcpy(buffer.baseAddress!, base, count) }
            initialized = count
        }
    }

    /// The bytes written so far.
    var bytes: UnsafeBufferPointer<UInt8> { UnsafeBufferPointer(start: base, count: count) }

    /// Makes room for `n` more bytes.
    @inline(__always)
    mutating func reserve(_ n: Int) {
        if _slowPath(count &+ n > capacity) { grow(n) }
    }

    @inline(never)
    private mutating func grow(_ n: Int) {
        let newCapacity = max(capacity * 2, count + n)
        let newBase = UnsafeMutablePointer<UInt8>.allocate(capacity: newCapacity)
        newBase.update(from: base, count: count)
        if onHeap { base.deallocate() }
        base = newBase
        capacity = newCapacity
        onHeap = true
    }

    /// Where the next byte goes; write at most the reserved room there, then ``advance(by:)``.
    var end: UnsafeMutablePointer<UInt8> { base + count }

    /// Counts `n` bytes written at ``end`` into reserved room.
    @inline(__always)
    mutating func advance(by n: Int) {
        count &+= n
    }

    /// Appends one byte, with room already reserved.
    @inline(__always)
    mutating func appendReserved(_ byte: UInt8) {
        base[count] = byte
        count &+= 1
    }

    @inline(__always)
    mutating func append(_ byte: UInt8) {
        reserve(1)
        appendReserved(byte)
    }

    @inline(__always)
    mutating func append(_ bytes: UnsafeBufferPointer<UInt8>) {
        guard let source = bytes.baseAddress, bytes.count > 0 else { return }
        reserve(bytes.count)
        memcpy(base + count, source, bytes.count)
        count &+= bytes.count
    }

    @inline(__always)
    mutating func append(_ bytes: [UInt8]) {
        bytes.withUnsafeBufferPointer { append($0) }
    }

    /// Appends a literal's UTF-8 bytes.
    @inline(__always)
    mutating func append(_ literal: StaticString) {
        append(UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount))
    }
}
