import CBeaconCRC
import Foundation
import Glibc

/// An open file of the log: a Foundation `FileHandle` plus the path it was opened from, for errors.
package final class LogFile: @unchecked Sendable {
    package let handle: FileHandle
    package let path: String
    package var descriptor: Int32 { handle.fileDescriptor }

    package init(handle: FileHandle, path: String) {
        self.handle = handle
        self.path = path
    }
}

/// How a file is opened.
package enum OpenMode: Sendable {
    /// Read only.
    case read
    /// Read and write; the file must exist.
    case readWrite
    /// Create a new file (mode 0600) for reading and writing; fails if it exists.
    case createNew
    /// Create the file (mode 0600) if missing, for reading and writing.
    case createOrOpen
}

/// Every file operation the log performs goes through this seam, so tests can inject `ENOSPC`,
/// `EIO` from fsync and short writes (see `FaultyFileSystem` in the tests), after the manner of
/// swift-system's `Internals/Syscalls.swift`. All errors are thrown as ``BeaconLogError`` with the
/// system call, its `errno` and the path as the ``BeaconLogError/cause``.
package protocol FileSystem: Sendable {
    /// `open(2)`, retried on `EINTR`, wrapped in a `FileHandle`.
    func open(_ path: String, _ mode: OpenMode) throws -> LogFile
    /// Writes all of `bytes` at the file's current offset (`write(2)` until done).
    func write(_ file: LogFile, _ bytes: UnsafeRawBufferPointer) throws
    /// Writes all of `bytes` at `offset` (`pwrite(2)`), not moving the file offset.
    func write(_ file: LogFile, _ bytes: UnsafeRawBufferPointer, at offset: UInt64) throws
    /// Reads up to `buffer.count` bytes at `offset` (`pread(2)`); returns the count, 0 at the end.
    func read(_ file: LogFile, into buffer: UnsafeMutableRawBufferPointer, at offset: UInt64) throws -> Int
    /// Makes the file's data durable: `fsync(2)`.
    func sync(_ file: LogFile) throws
    /// Makes the file's data durable without forcing unrelated metadata (`fdatasync(2)`): used for
    /// the in-place checkpoint slot, whose size never changes. Defaults to ``sync(_:)``.
    func syncData(_ file: LogFile) throws
    /// Cuts the file to `size` bytes and moves the file offset there (`ftruncate(2)` + `lseek(2)`).
    func truncate(_ file: LogFile, to size: UInt64) throws
    /// Allocates the file's blocks up to `size` bytes and makes that its size, the new bytes reading
    /// as zeros (`fallocate(2)` mode 0), without moving the file offset: an fsync of a later write
    /// inside that space need not record a new size. Throws with `errno` `EOPNOTSUPP` where the
    /// file system cannot (the caller then writes without it).
    func preallocate(_ file: LogFile, size: UInt64) throws
    /// Starts writing `length` bytes at `offset` to the disk without waiting for them
    /// (`sync_file_range(2)` with `SYNC_FILE_RANGE_WRITE`): no durability promise, only less for
    /// the next fsync to wait for. Advisory: failures are ignored.
    func startWriteback(_ file: LogFile, offset: UInt64, length: UInt64)
    /// The file's size (`fstat(2)`).
    func size(_ file: LogFile) throws -> UInt64
    /// Closes the file.
    func close(_ file: LogFile)
    /// Takes a `flock(2)` lock without waiting; returns false if another open file description holds it.
    func tryLock(_ file: LogFile) throws -> Bool
    /// `rename(2)`.
    func rename(_ from: String, to: String) throws
    /// `unlink(2)`; a missing file is not an error.
    func remove(_ path: String) throws
    /// `fsync(2)` on the directory, making created, renamed and removed entries durable.
    func syncDirectory(_ path: String) throws
    /// The names in a directory (`readdir(3)`).
    func list(_ directory: String) throws -> [String]
    /// The size of the file at `path` (`stat(2)`), or nil if it does not exist.
    func fileSize(_ path: String) throws -> UInt64?
    /// Creates the one directory `path` (`mkdir(2)`, mode 0700) and returns true, or returns false
    /// when a directory is already there. Its parent must exist: a missing parent throws with
    /// `errno` `ENOENT`; anything else in the way (a file) throws naming the path. Making the new
    /// entry durable is the caller's part (``syncDirectory(_:)`` on the parent): see
    /// ``makeDirectories(_:)``.
    func makeDirectory(_ path: String) throws -> Bool
}

extension FileSystem {
    package func syncData(_ file: LogFile) throws { try sync(file) }
}

/// The real file system: each call one system call (retried on `EINTR`), its `errno` captured
/// where it fails.
package struct SystemFileSystem: FileSystem {
    package init() {}

    package func open(_ path: String, _ mode: OpenMode) throws -> LogFile {
        let flags: Int32
        switch mode {
        case .read: flags = O_RDONLY
        case .readWrite: flags = O_RDWR
        case .createNew: flags = O_RDWR | O_CREAT | O_EXCL
        case .createOrOpen: flags = O_RDWR | O_CREAT
        }
        let fd = try retryingEINTR(path: path, "open") { Glibc.open(path, flags | O_CLOEXEC, 0o600) }
        if mode == .readWrite || mode == .createOrOpen || mode == .createNew {
            _ = lseek(fd, 0, SEEK_END)
        }
        return LogFile(handle: FileHandle(fileDescriptor: fd, closeOnDealloc: true), path: path)
    }

    package func write(_ file: LogFile, _ bytes: UnsafeRawBufferPointer) throws {
        var done = 0
        while done < bytes.count {
            done += try retryingEINTR(path: file.path, "write") {
                Glibc.write(file.descriptor, bytes.baseAddress! + done, bytes.count - done)
            }
        }
    }

    package func write(_ file: LogFile, _ bytes: UnsafeRawBufferPointer, at offset: UInt64) throws {
        var done = 0
        while done < bytes.count {
            let n = try retryingEINTR(path: file.path, "pwrite") {
                Glibc.pwrite(file.descriptor, bytes.baseAddress! + done, bytes.count - done, off_t(offset) + off_t(done))
            }
            done += n
        }
    }

    package func read(_ file: LogFile, into buffer: UnsafeMutableRawBufferPointer, at offset: UInt64) throws -> Int {
        try retryingEINTR(path: file.path, "pread") {
            Glibc.pread(file.descriptor, buffer.baseAddress, buffer.count, off_t(offset))
        }
    }

    package func sync(_ file: LogFile) throws {
        _ = try retryingEINTR(path: file.path, "fsync") { fsync(file.descriptor) }
    }

    package func syncData(_ file: LogFile) throws {
        _ = try retryingEINTR(path: file.path, "fdatasync") { fdatasync(file.descriptor) }
    }

    package func truncate(_ file: LogFile, to size: UInt64) throws {
        _ = try retryingEINTR(path: file.path, "ftruncate") { ftruncate(file.descriptor, off_t(size)) }
        _ = lseek(file.descriptor, off_t(size), SEEK_SET)
    }

    package func preallocate(_ file: LogFile, size: UInt64) throws {
        while true {
            let e = beacon_fallocate(file.descriptor, Int64(size))
            if e == 0 { return }
            if e != EINTR { throw BeaconLogError.system(e, path: file.path, operation: "fallocate") }
        }
    }

    package func startWriteback(_ file: LogFile, offset: UInt64, length: UInt64) {
        _ = beacon_start_writeback(file.descriptor, Int64(offset), Int64(length))
    }

    package func size(_ file: LogFile) throws -> UInt64 {
        var st = stat()
        _ = try retryingEINTR(path: file.path, "fstat") { fstat(file.descriptor, &st) }
        return UInt64(st.st_size)
    }

    package func close(_ file: LogFile) {
        try? file.handle.close()
    }

    package func tryLock(_ file: LogFile) throws -> Bool {
        let (result, e) = retryingInterrupts { flock(file.descriptor, LOCK_EX | LOCK_NB) }
        if result == 0 { return true }
        if e == EWOULDBLOCK { return false }
        throw BeaconLogError.system(e, path: file.path, operation: "flock")
    }

    package func rename(_ from: String, to: String) throws {
        _ = try retryingEINTR(path: from, "rename") { Glibc.rename(from, to) }
    }

    package func remove(_ path: String) throws {
        let (result, e) = retryingInterrupts { unlink(path) }
        if result != 0 && e != ENOENT {
            throw BeaconLogError.system(e, path: path, operation: "unlink")
        }
    }

    package func syncDirectory(_ path: String) throws {
        let fd = try retryingEINTR(path: path, "open") { Glibc.open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        defer { Glibc.close(fd) }
        _ = try retryingEINTR(path: path, "fsync") { fsync(fd) }
    }

    package func list(_ directory: String) throws -> [String] {
        guard let dir = opendir(directory) else {
            throw BeaconLogError.system(errno, path: directory, operation: "opendir")
        }
        defer { closedir(dir) }
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    package func fileSize(_ path: String) throws -> UInt64? {
        var st = stat()
        let (result, e) = retryingInterrupts { stat(path, &st) }
        if result != 0 {
            if e == ENOENT { return nil }
            throw BeaconLogError.system(e, path: path, operation: "stat")
        }
        return UInt64(st.st_size)
    }

    package func makeDirectory(_ path: String) throws -> Bool {
        let (result, e) = retryingInterrupts { mkdir(path, 0o700) }
        if result == 0 { return true }
        if e == EEXIST {
            var st = stat()
            if retryingInterrupts({ stat(path, &st) }).result == 0 && (st.st_mode & S_IFMT) == S_IFDIR { return false }
            throw BeaconLogError.directory(ENOTDIR, path: path)
        }
        throw BeaconLogError.directory(e, path: path)
    }
}

extension FileSystem {
    /// Creates the directory `path` and each missing parent, like `mkdir -p`, each with mode 0700,
    /// and fsyncs the parent of every directory it creates, right after creating it, so that a
    /// power loss cannot take the new entry (and everything later made durable inside it) away.
    ///
    /// Relative paths (`d`, `a/b/`), `..` components and trailing slashes are fine. Nothing is
    /// created or synced when the directory exists.
    package func makeDirectories(_ path: String) throws {
        let created: Bool
        do {
            created = try makeDirectory(path)
        } catch let error as BeaconLogError where error.errno == ENOENT {
            let parent = parentDirectory(of: path)
            guard parent != path else { throw error }
            try makeDirectories(parent)
            created = try makeDirectory(path)
        }
        if created { try syncDirectory(parentDirectory(of: path)) }
    }
}

/// The directory holding `path`'s last component: `a/b/` → `a`, `d` → `.`, `/d` → `/`, `/` → `/`.
/// Works on the bytes of the path alone (no Foundation path APIs, which trap on some relative paths).
package func parentDirectory(of path: String) -> String {
    var bytes = Array(path.utf8)
    while bytes.count > 1 && bytes.last == UInt8(ascii: "/") { bytes.removeLast() }
    guard let slash = bytes.lastIndex(of: UInt8(ascii: "/")) else { return "." }
    bytes.removeSubrange(slash...)
    while bytes.count > 1 && bytes.last == UInt8(ascii: "/") { bytes.removeLast() }
    return bytes.isEmpty ? "/" : String(decoding: bytes, as: UTF8.self)
}

/// Runs a system call until a signal does not interrupt it: the one place where `EINTR` is
/// retried, as swift-system's `valueOrErrno(retryOnInterrupt:_:)`. Returns the call's result and,
/// when it is negative, the `errno` it left.
@inline(__always)
package func retryingInterrupts<T: BinaryInteger>(_ call: () -> T) -> (result: T, errno: Int32) {
    while true {
        let result = call()
        if result >= 0 { return (result, 0) }
        let e = errno
        if e != EINTR { return (result, e) }
    }
}

/// Runs a system call, retrying on `EINTR`; a negative result becomes a ``BeaconLogError``
/// naming `path` and the call.
@inline(__always)
package func retryingEINTR<T: BinaryInteger>(path: String, _ operation: String, _ call: () -> T) throws -> T {
    let (result, e) = retryingInterrupts(call)
    if result < 0 { throw BeaconLogError.system(e, path: path, operation: operation) }
    return result
}

extension BeaconLogError {
    /// The error for a failed system call: its code from the `errno`, a message that says only
    /// what failed. What to do depends on what the call was for: the caller adds that
    /// (``advising(_:)``).
    package static func system(_ e: Int32, path: String, operation: String) -> BeaconLogError {
        let code: Code
        switch e {
        case ENOSPC, EDQUOT: code = .diskFull
        case EACCES, EPERM: code = .permissionDenied
        default: code = .io
        }
        return BeaconLogError(code, "\(operation) failed: \(String(cString: strerror(e)))", path: path,
                              cause: SystemCallError(systemCall: operation, errno: e, path: path))
    }

    /// An error for a directory that could not be created, saying what is in the way and what to do.
    package static func directory(_ e: Int32, path: String) -> BeaconLogError {
        let advice: String
        switch e {
        case ENOTDIR:
            advice = "cannot create the log directory: the path, or one of the directories above it, is a file; choose another path or move the file away"
        case ENAMETOOLONG:
            advice = "cannot create the log directory: the path is too long (a name over 255 bytes or a path over 4096); choose a shorter path"
        case EACCES, EPERM:
            advice = "cannot create the log directory: permission denied; create it yourself (mode 0700, owned by the user the service runs as) or choose a directory this user may write to"
        case EROFS:
            advice = "cannot create the log directory: the file system is read-only; choose a directory on a writable file system"
        case ENOSPC, EDQUOT:
            advice = "cannot create the log directory: the file system is full; free space on it"
        case ELOOP:
            advice = "cannot create the log directory: too many symbolic links in the path; use the real path"
        default:
            return system(e, path: path, operation: "mkdir")
        }
        var error = system(e, path: path, operation: "mkdir")
        error.message = advice
        return error
    }
}
