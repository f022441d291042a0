import Glibc

/// Buffered output to a file descriptor with `write(2)`, for stdout and stderr.
///
/// Writes collect in a user-space buffer and go out in one `write(2)` per 256 KiB or on
/// ``flush()``, which retries partial writes and `EINTR` and throws a ``CLIError`` with code
/// ``ExitCode/ioError`` on failure (for example `EPIPE` when the reader went away).
///
/// ```swift
/// var out = Console.standardOutput
/// out.write("hello\n")
/// try out.flush()
/// ```
struct Console {
    /// The file descriptor written to.
    let fd: Int32
    /// What `write` has collected since the last flush.
    private(set) var buffer: [UInt8] = []
    /// Flush automatically once this many bytes are buffered.
    var capacity: Int

    init(fd: Int32, capacity: Int = 256 * 1024) {
        self.fd = fd
        self.capacity = capacity
        buffer.reserveCapacity(capacity)
    }

    /// Buffered standard output.
    static var standardOutput: Console { Console(fd: 1) }

    /// Buffers `text`; flushes first if the buffer is full.
    mutating func write(_ text: String) {
        var text = text
        text.withUTF8 { write(UnsafeRawBufferPointer($0)) }
    }

    /// Buffers `bytes`; flushes once the buffer is full. A write error is kept and thrown by the
    /// next ``flush()``.
    mutating func write(_ bytes: UnsafeRawBufferPointer) {
        buffer.append(contentsOf: bytes)
        if buffer.count >= capacity { try? flushKeepingError() }
    }

    /// Buffers `bytes` followed by a newline.
    mutating func writeLine(_ bytes: some Collection<UInt8>) {
        buffer.append(contentsOf: bytes)
        buffer.append(0x0A)
        if buffer.count >= capacity { try? flushKeepingError() }
    }

    private var pendingError: CLIError?

    private mutating func flushKeepingError() throws {
        do { try flush() } catch let error as CLIError { pendingError = error; throw error }
    }

    /// Writes everything buffered with `write(2)`; throws ``ExitCode/ioError`` if the descriptor
    /// refuses it (the unwritten bytes are dropped).
    mutating func flush() throws {
        if let pendingError {
            buffer.removeAll(keepingCapacity: true)
            throw pendingError
        }
        defer { buffer.removeAll(keepingCapacity: true) }
        try buffer.withUnsafeBytes { try Self.writeAll(fd, $0) }
    }

    /// Writes all of `bytes` to `fd`, retrying `EINTR` and partial writes.
    static func writeAll(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) throws {
        var done = 0
        while done < bytes.count {
            let n = Glibc.write(fd, bytes.baseAddress! + done, bytes.count - done)
            if n < 0 {
                if errno == EINTR { continue }
                let what = fd == 1 ? "standard output" : fd == 2 ? "standard error" : "file descriptor \(fd)"
                let reason = errno == EPIPE ? "the reading end of the pipe was closed" : String(cString: strerror(errno))
                throw CLIError(.ioError, "cannot write to \(what): \(reason)")
            }
            done += n
        }
    }

    /// Writes `text` to standard error at once (unbuffered); errors are ignored.
    static func writeError(_ text: String) {
        var text = text
        text.withUTF8 { try? writeAll(2, UnsafeRawBufferPointer($0)) }
    }
}
