import Foundation
import Glibc

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

    /// The error for a symbolic link (or, with `hardLinks`, a file with more than one hard link)
    /// found in place of a file of the log directory: it is neither followed nor written through.
    package static func linkedFile(_ path: String, hardLinks: Int? = nil) -> BeaconLogError {
        let what = hardLinks.map { "a file with \($0) hard links (another name elsewhere points at the same data)" } ?? "a symbolic link"
        return BeaconLogError(
            .linkedFile,
            "\(path) is \(what), not a file of its own; Beacon never writes through a link, since whoever planted it could make Beacon overwrite the file it points to. Remove the link (rm \(shellQuoted(path))), check who could write the log directory, and start again",
            path: path)
    }

    /// The error for something other than a regular file (a FIFO, a socket, a device, a
    /// directory) found in place of a file of the log directory: it is neither opened for
    /// writing nor read, since a device may act on its open and a FIFO would block.
    package static func notRegularFile(_ path: String, mode: mode_t) -> BeaconLogError {
        let what: String
        switch mode & S_IFMT {
        case S_IFIFO: what = "a FIFO (named pipe)"
        case S_IFSOCK: what = "a socket"
        case S_IFCHR: what = "a character device"
        case S_IFBLK: what = "a block device"
        case S_IFDIR: what = "a directory"
        default: what = "not a regular file"
        }
        return BeaconLogError(
            .notRegularFile,
            "\(path) is \(what), not a file of the log; Beacon writes its files only as regular files it made, since whoever put this there could make Beacon block or write into something else. Remove it (rm \(shellQuoted(path))\((mode & S_IFMT) == S_IFDIR ? ", or rmdir" : "")), check who could write the log directory, and start again",
            path: path)
    }

    /// The error for a log directory path whose last component is a symbolic link.
    package static func linkedDirectory(_ path: String) -> BeaconLogError {
        BeaconLogError(
            .linkedFile,
            "the log directory \(path) is a symbolic link; Beacon opens its directory without following a link, so that the directory cannot be swapped for another. Configure the real path instead (realpath \(shellQuoted(path)))",
            path: path)
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

/// `text` quoted for a shell, when it needs to be: for commands written into messages.
package func shellQuoted(_ text: String) -> String {
    let plain = text.utf8.allSatisfy { b in
        (b >= 0x30 && b <= 0x39) || (b >= 0x41 && b <= 0x5A) || (b >= 0x61 && b <= 0x7A) || "/._-+,:=@%".utf8.contains(b)
    }
    return plain && !text.isEmpty ? text : "'" + text.replacingOccurrences(of: "'", with: "'\\''") + "'"
}
