import BeaconLog
import Glibc

/// Opening a log directory for a command, with errors that say what to do.
///
/// Use it instead of `BeaconLog(configuration:)` in commands: it refuses to create a directory
/// for a reading command and turns a held lock into exit code 75 naming the holder.
enum LogOpening {
    /// Opens the log in `directory` for a command.
    ///
    /// Only a writer (`.write`, `.readWrite`) creates a missing directory; for reading it must exist (a typo must not create a new, empty log
    /// that reports "0 pending"); an error says which path is missing. A held lock becomes a
    /// ``CLIError`` with ``ExitCode/locked`` naming the holder's pid and the lock file; other
    /// failures are mapped by ``ExitCode/forError(_:)``.
    ///
    /// - Parameters:
    ///   - directory: the log directory given on the command line.
    ///   - access: the locks to take: `.write` to append, `.read` to acknowledge, `.readOnly` to inspect.
    ///   - configure: sets anything else in the configuration (durability, quota, record size).
    ///
    /// ```swift
    /// let log = try LogOpening.open(dir, access: .write) { $0.durability = .everyRecord }
    /// ```
    static func open(_ directory: String, access: BeaconLog.Access, configure: (inout BeaconLog.Configuration) -> Void = { _ in }) throws -> BeaconLog {
        try requireDirectory(directory, mayCreate: access == .write || access == .readWrite)
        var configuration = BeaconLog.Configuration(directory: directory)
        configuration.access = access
        configuration.sharing = try sharing()
        configure(&configuration)
        do {
            return try BeaconLog(configuration: configuration)
        } catch let error as BeaconLogError where error.code == .locked {
            let kind: BeaconLog.LockKind = (access == .write || (access == .readWrite && BeaconLog.lockHolder(.writer, directory: directory) != nil)) ? .writer : .reader
            throw CLIError.locked(directory, kind, pid: error.lockHolderPID ?? BeaconLog.lockHolder(kind, directory: directory))
        } catch {
            throw CLIError(wrapping: error)
        }
    }

    /// Who besides this user may write the log directory: `BEACON_DIRECTORY_SHARING=group` for a
    /// directory shared with a group on purpose (mode 0770, any owner), else the owner alone.
    static func sharing() throws -> BeaconLog.DirectorySharing {
        switch getenv("BEACON_DIRECTORY_SHARING").map({ String(cString: $0) }) ?? "" {
        case "", "owner": return .owner
        case "group": return .group
        case let other: throw CLIError(.usage, "BEACON_DIRECTORY_SHARING is '\(other)'; use owner (the default: the directory is this user's alone) or group (a directory its group may write)")
        }
    }

    /// Throws ``ExitCode/ioError`` if `directory` is missing or not a directory (unless it may be
    /// created: its parent must then exist).
    static func requireDirectory(_ directory: String, mayCreate: Bool) throws {
        var info = stat()
        if stat(directory, &info) == 0 {
            if (info.st_mode & S_IFMT) != S_IFDIR {
                throw CLIError(.ioError, "\(directory) is not a directory; pass a Beacon log directory")
            }
            return
        }
        let reason = String(cString: strerror(errno))
        if !mayCreate {
            throw CLIError(.ioError, "cannot open log directory \(directory): \(reason); check the path")
        }
    }
}
