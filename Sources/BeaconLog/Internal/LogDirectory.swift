import Glibc
import Synchronization

/// The log directory, opened once (`open(2)` with `O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC`) at its
/// first use and kept open: every file of the log is opened, renamed, removed and looked up
/// relative to this descriptor (`openat(2)`, `renameat(2)`, `unlinkat(2)`, `fstatat(2)`), and the
/// directory's entries are made durable with `fsync(2)` of it. A path swapped for a symbolic link
/// after the directory was opened is therefore never followed: the descriptor stays on the
/// directory that was opened.
///
/// The last component of ``path`` must not be a symbolic link (the components above it may be,
/// as `/var/run` is); trailing slashes are dropped first, so `dir/` opens `dir`.
///
/// ```swift
/// let directory = LogDirectory("/var/lib/app/beacon")
/// let file = try fs.open(directory.file("checkpoint"), .read)
/// ```
package final class LogDirectory: Sendable, CustomStringConvertible {
    /// The directory's path as configured, without trailing slashes: for messages and the journal.
    package let path: String
    private let opened = Mutex<Int32?>(nil)

    package init(_ path: String) {
        var trimmed = path
        while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed.removeLast() }
        self.path = trimmed
    }

    deinit {
        opened.withLock { fd in fd.map { _ = Glibc.close($0) } }
    }

    package var description: String { path }

    /// The file `name` of this directory.
    package func file(_ name: String) -> LogPath { LogPath(directory: self, name: name) }

    /// The descriptor of the directory: opened on the first call (`open(2)` with
    /// `O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC`), the same one afterwards.
    ///
    /// Throws ``BeaconLogError/Code/linkedFile`` when the path's last component is a symbolic
    /// link, and the `open(2)` error (`ENOENT`, `ENOTDIR`, `EACCES`) otherwise.
    package func descriptor() throws -> Int32 {
        try opened.withLock { fd in
            if let fd { return fd }
            let (result, e) = retryingInterrupts { Glibc.open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC) }
            if result < 0 {
                if e == ELOOP || (e == ENOTDIR && isSymbolicLink(path)) {
                    throw BeaconLogError.linkedDirectory(path)
                }
                throw BeaconLogError.system(e, path: path, operation: "open")
            }
            fd = result
            return result
        }
    }
}

/// Whether `path` itself (not what it points to) is a symbolic link (`lstat(2)`).
private func isSymbolicLink(_ path: String) -> Bool {
    var st = stat()
    return retryingInterrupts({ lstat(path, &st) }).result == 0 && (st.st_mode & S_IFMT) == S_IFLNK
}
