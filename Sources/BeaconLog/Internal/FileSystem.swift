import CBeaconFileCalls
import Foundation
import Glibc
import Synchronization

/// What `fstat(2)` says about the log directory: what its safety check needs.
package struct DirectoryStatus: Sendable, Equatable {
    /// The permission bits, with set-user-id, set-group-id and sticky (`st_mode & 0o7777`).
    package var mode: UInt32
    /// The owner's user id.
    package var owner: UInt32
    /// The group's id.
    package var group: UInt32

    package init(mode: UInt32, owner: UInt32, group: UInt32) {
        self.mode = mode
        self.owner = owner
        self.group = group
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
///
/// Files of the log directory are named by a ``LogPath``: the directory's descriptor, opened once
/// (``LogDirectory``), and the file's name. No call follows a symbolic link in place of a file:
/// files are opened with `O_NOFOLLOW`, and a link found there is a
/// ``BeaconLogError/Code/linkedFile`` error naming the file, never followed, truncated or
/// written through.
package protocol FileSystem: Sendable {
    /// `openat(2)` relative to the directory's descriptor with `O_NOFOLLOW | O_CLOEXEC`, retried on
    /// `EINTR`, wrapped in a `FileHandle`. A symbolic link in place of the file throws
    /// ``BeaconLogError/Code/linkedFile``; so does a file with another hard link (`st_nlink > 1`),
    /// found by `fstat(2)` after the open, before anything is read or written. Anything but a
    /// regular file (a FIFO, a socket, a device) throws ``BeaconLogError/Code/notRegularFile``,
    /// looked at before the open and after it; the open is `O_NONBLOCK`, so a FIFO swapped in
    /// between cannot block it.
    func open(_ file: LogPath, _ mode: OpenMode) throws -> LogFile
    /// Writes all of `bytes` at the file's current offset (`write(2)` until done).
    func write(_ file: LogFile, _ bytes: UnsafeRawBufferPointer) throws
    /// Writes all of `bytes` at `offset` (`pwrite(2)`), not moving the file offset.
    func write(_ file: LogFile, _ bytes: UnsafeRawBufferPointer, at offset: UInt64) throws
    /// Reads up to `buffer.count` bytes at `offset` (`pread(2)`); returns the count, 0 at the end.
    func read(_ file: LogFile, into buffer: UnsafeMutableRawBufferPointer, at offset: UInt64) throws -> Int
    /// Makes the file's data durable, with the metadata a read after a crash needs (its size and
    /// where its blocks are), not its times: `fdatasync(2)`. A segment's commit makes no other
    /// change a reader needs (its size is fixed while zeros are written ahead, and a cut or an
    /// append changes the size, which `fdatasync` writes); on a journaled ext4 `fsync(2)` would
    /// also commit the journal for the changed modification time at every commit.
    func sync(_ file: LogFile) throws
    /// Makes the in-place checkpoint slot durable (`fdatasync(2)`, as ``sync(_:)``): a call of
    /// its own, so that fault injection can tell the checkpoint's syncs from the segments'.
    /// Defaults to ``sync(_:)``.
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
    /// Releases the `flock(2)` lock of `file`'s open file description (`LOCK_UN`), also for every
    /// copy of its descriptor: a child process another thread is spawning holds one until its
    /// `exec`, and a `close` alone leaves the lock held until then.
    func unlock(_ file: LogFile)
    /// `renameat(2)` between two names of the same directory's descriptor. A link at either name
    /// is renamed or replaced itself, never followed.
    func rename(_ from: LogPath, to: LogPath) throws
    /// `unlinkat(2)`; a missing file is not an error. A link is removed itself, never what it
    /// points to.
    func remove(_ file: LogPath) throws
    /// `fsync(2)` of the directory's descriptor, making created, renamed and removed entries durable.
    func syncDirectory(_ directory: LogDirectory) throws
    /// `fsync(2)` of the directory at `path` (opened `O_DIRECTORY`, read only): the parents of a
    /// directory ``makeDirectories(_:)`` creates, which are not log directories.
    func syncDirectory(_ path: String) throws
    /// The names in the directory (`readdir(3)` on a duplicate of its descriptor).
    func list(_ directory: LogDirectory) throws -> [String]
    /// The size of the file (`fstatat(2)` with `AT_SYMLINK_NOFOLLOW`), or nil if it does not
    /// exist. A symbolic link there throws ``BeaconLogError/Code/linkedFile``, anything else but a
    /// regular file ``BeaconLogError/Code/notRegularFile``.
    func fileSize(_ file: LogPath) throws -> UInt64?
    /// The directory's mode, owner and group (`fstat(2)` of its descriptor), for the safety check
    /// at open; opens it if it is not open yet.
    func status(_ directory: LogDirectory) throws -> DirectoryStatus
    /// Creates the one directory `path` (`mkdir(2)`, mode 0700) and returns true, or returns false
    /// when a directory is already there. Its parent must exist: a missing parent throws with
    /// `errno` `ENOENT`; anything else in the way (a file) throws naming the path. Making the new
    /// entry durable is the caller's part (``syncDirectory(_:)-(String)`` on the parent): see
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

    package func open(_ file: LogPath, _ mode: OpenMode) throws -> LogFile {
        let flags: Int32
        switch mode {
        case .read: flags = O_RDONLY
        case .readWrite: flags = O_RDWR
        case .createNew: flags = O_RDWR | O_CREAT | O_EXCL
        case .createOrOpen: flags = O_RDWR | O_CREAT
        }
        let directory = try file.directory.descriptor()
        // Never open what is not a regular file: opening a device may act on it, and a FIFO
        // would block. Looked at before the open (AT_SYMLINK_NOFOLLOW), and again after it
        // (fstat), for a name swapped in between; O_NONBLOCK so that even that open returns.
        var found = stat()
        if retryingInterrupts({ fstatat(directory, file.name, &found, AT_SYMLINK_NOFOLLOW) }).result == 0 {
            if (found.st_mode & S_IFMT) == S_IFLNK { throw BeaconLogError.linkedFile(file.path) }
            if (found.st_mode & S_IFMT) != S_IFREG { throw BeaconLogError.notRegularFile(file.path, mode: found.st_mode) }
        }
        let (result, e) = retryingInterrupts { openat(directory, file.name, flags | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, 0o600) }
        if result < 0 {
            // O_NOFOLLOW: ELOOP when the name is a symbolic link (EEXIST for O_EXCL, which never follows).
            if e == ELOOP || (e == EEXIST && isLink(file)) { throw BeaconLogError.linkedFile(file.path) }
            // ENXIO: a socket, or a FIFO without a reader, swapped in after the look above.
            if e == ENXIO || e == ENODEV, let mode = fileMode(file), (mode & S_IFMT) != S_IFREG {
                throw BeaconLogError.notRegularFile(file.path, mode: mode)
            }
            throw BeaconLogError.system(e, path: file.path, operation: "open")
        }
        let fd = result
        // What was opened, before anything is read or written: a regular file with no other name.
        // A second hard link lets whoever made it have Beacon write into (or read from) a file
        // elsewhere, as a symbolic link would.
        var st = stat()
        if retryingInterrupts({ fstat(fd, &st) }).result != 0 {
            let e = errno
            Glibc.close(fd)
            throw BeaconLogError.system(e, path: file.path, operation: "fstat")
        }
        if (st.st_mode & S_IFMT) != S_IFREG {
            Glibc.close(fd)
            throw BeaconLogError.notRegularFile(file.path, mode: st.st_mode)
        }
        if st.st_nlink > 1 {
            Glibc.close(fd)
            throw BeaconLogError.linkedFile(file.path, hardLinks: Int(st.st_nlink))
        }
        let flagsNow = fcntl(fd, F_GETFL)
        if flagsNow >= 0 { _ = fcntl(fd, F_SETFL, flagsNow & ~O_NONBLOCK) }
        if mode != .read { _ = lseek(fd, 0, SEEK_END) }
        return LogFile(handle: FileHandle(fileDescriptor: fd, closeOnDealloc: true), path: file.path)
    }

    /// The name's `st_mode` (`fstatat(2)` with `AT_SYMLINK_NOFOLLOW`), or nil if it cannot be read.
    private func fileMode(_ file: LogPath) -> mode_t? {
        guard let directory = try? file.directory.descriptor() else { return nil }
        var st = stat()
        return retryingInterrupts({ fstatat(directory, file.name, &st, AT_SYMLINK_NOFOLLOW) }).result == 0 ? st.st_mode : nil
    }

    /// Whether the name is a symbolic link (`fstatat(2)` with `AT_SYMLINK_NOFOLLOW`).
    private func isLink(_ file: LogPath) -> Bool {
        guard let directory = try? file.directory.descriptor() else { return false }
        var st = stat()
        return retryingInterrupts({ fstatat(directory, file.name, &st, AT_SYMLINK_NOFOLLOW) }).result == 0 && (st.st_mode & S_IFMT) == S_IFLNK
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

    package func unlock(_ file: LogFile) {
        _ = retryingInterrupts { flock(file.descriptor, LOCK_UN) }
    }

    package func tryLock(_ file: LogFile) throws -> Bool {
        let (result, e) = retryingInterrupts { flock(file.descriptor, LOCK_EX | LOCK_NB) }
        if result == 0 { return true }
        if e == EWOULDBLOCK { return false }
        throw BeaconLogError.system(e, path: file.path, operation: "flock")
    }

    package func rename(_ from: LogPath, to: LogPath) throws {
        let source = try from.directory.descriptor()
        let target = try to.directory.descriptor()
        _ = try retryingEINTR(path: from.path, "rename") { renameat(source, from.name, target, to.name) }
    }

    package func remove(_ file: LogPath) throws {
        let directory = try file.directory.descriptor()
        let (result, e) = retryingInterrupts { unlinkat(directory, file.name, 0) }
        if result != 0 && e != ENOENT {
            throw BeaconLogError.system(e, path: file.path, operation: "unlink")
        }
    }

    package func syncDirectory(_ directory: LogDirectory) throws {
        let fd = try directory.descriptor()
        _ = try retryingEINTR(path: directory.path, "fsync") { fsync(fd) }
    }

    package func syncDirectory(_ path: String) throws {
        let fd = try retryingEINTR(path: path, "open") { Glibc.open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC) }
        defer { Glibc.close(fd) }
        _ = try retryingEINTR(path: path, "fsync") { fsync(fd) }
    }

    package func list(_ directory: LogDirectory) throws -> [String] {
        let fd = try directory.descriptor()
        let copy = try retryingEINTR(path: directory.path, "dup") { dup(fd) }
        guard let dir = fdopendir(copy) else {
            let e = errno
            Glibc.close(copy)
            throw BeaconLogError.system(e, path: directory.path, operation: "fdopendir")
        }
        defer { closedir(dir) }
        // The duplicate shares the original's offset: start from the first entry.
        rewinddir(dir)
        var names: [String] = []
        while let entry = readdir(dir) {
            let name = withUnsafeBytes(of: entry.pointee.d_name) { raw in
                String(decoding: raw.prefix(while: { $0 != 0 }), as: UTF8.self)
            }
            if name != "." && name != ".." { names.append(name) }
        }
        return names
    }

    package func fileSize(_ file: LogPath) throws -> UInt64? {
        let directory = try file.directory.descriptor()
        var st = stat()
        let (result, e) = retryingInterrupts { fstatat(directory, file.name, &st, AT_SYMLINK_NOFOLLOW) }
        if result != 0 {
            if e == ENOENT { return nil }
            throw BeaconLogError.system(e, path: file.path, operation: "stat")
        }
        if (st.st_mode & S_IFMT) == S_IFLNK { throw BeaconLogError.linkedFile(file.path) }
        if (st.st_mode & S_IFMT) != S_IFREG { throw BeaconLogError.notRegularFile(file.path, mode: st.st_mode) }
        return UInt64(st.st_size)
    }

    package func status(_ directory: LogDirectory) throws -> DirectoryStatus {
        let fd = try directory.descriptor()
        var st = stat()
        _ = try retryingEINTR(path: directory.path, "fstat") { fstat(fd, &st) }
        return DirectoryStatus(mode: UInt32(st.st_mode) & 0o7777, owner: st.st_uid, group: st.st_gid)
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
