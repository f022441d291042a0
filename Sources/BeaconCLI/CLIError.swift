import BeaconLog
import Glibc

/// The exit codes of `beacon`, documented in `beacon help` (the values follow sysexits.h).
enum ExitCode: Int32, CaseIterable, Sendable {
    /// Success.
    case ok = 0
    /// The command ran and found a problem (corruption, records passed over).
    case problemFound = 1
    /// Wrong arguments: unknown command or flag, missing or bad value (EX_USAGE).
    case usage = 64
    /// Bad input data: a line that is not JSON or is too large (EX_DATAERR).
    case dataError = 65
    /// An I/O error: a failed read, write or fsync, a full disk, a missing directory (EX_IOERR).
    case ioError = 74
    /// The directory's writer or reader lock is held by another process (EX_TEMPFAIL: try later).
    case locked = 75

    /// What the code means, for `beacon help`.
    var meaning: String {
        switch self {
        case .ok: "ok"
        case .problemFound: "the command found a problem (e.g. corruption)"
        case .usage: "usage error (unknown command or flag, missing or bad argument)"
        case .dataError: "bad input data (a line that is not JSON or is too large)"
        case .ioError: "I/O error (read, write, fsync, disk full, missing directory)"
        case .locked: "the directory is locked by another process; try again later"
        }
    }

    /// The exit code for an error a command let through: a `CLIError` keeps its code, a
    /// `BeaconLogError` is mapped by its code, anything else is an I/O error.
    static func forError(_ error: any Error) -> ExitCode {
        if let error = error as? CLIError { return error.code }
        guard let error = error as? BeaconLogError else { return .ioError }
        switch error.code {
        case .locked: return .locked
        case .recordTooLarge, .invalidRecord, .corrupt: return .dataError
        case .invalidArgument: return .usage
        default: return .ioError  // .io, .permissionDenied, .diskFull, .quotaExceeded, .failed, .closed, future codes
        }
    }
}

/// A failure of a `beacon` command: the exit code and a sentence saying what failed and what to do.
///
/// The tool prints `beacon COMMAND: MESSAGE` on stderr (plus the usage for ``ExitCode/usage``)
/// and exits with `code`.
struct CLIError: Error, Sendable, CustomStringConvertible {
    /// The exit code.
    var code: ExitCode
    /// What failed and what to do, without the `beacon COMMAND:` prefix.
    var message: String

    init(_ code: ExitCode, _ message: String) {
        self.code = code
        self.message = message
    }

    /// Wraps any error with its mapped exit code and an explanation.
    init(wrapping error: any Error) {
        self.init(ExitCode.forError(error), Self.describe(error))
    }

    var description: String { message }

    /// The error for a directory whose `kind` lock another process holds (exit 75), naming the
    /// holder's pid when it is known.
    ///
    /// ```swift
    /// throw CLIError.locked(directory, .writer, pid: error.lockHolderPID)
    /// ```
    static func locked(_ directory: String, _ kind: BeaconLog.LockKind, pid: Int32?) -> CLIError {
        let holder = pid.map { $0 > 0 ? "process \($0)" : "another process" } ?? "another process"
        let role = kind == .writer ? "writer" : "reader"
        return CLIError(.locked, "\(directory) is locked: \(holder) holds \(kind.rawValue).lock (one \(role) per directory); stop it or try again later")
    }

    /// A one-line explanation of `error` for stderr. For a lock held by another process it names
    /// the holder's pid.
    static func describe(_ error: any Error) -> String {
        if let error = error as? CLIError { return error.message }
        guard let error = error as? BeaconLogError else { return "\(error)" }
        var text = error.failure ?? error.message
        if let path = error.path { text += " [\(path)]" }
        if let cause = error.cause { text += " (\(cause.systemCall): \(String(cString: strerror(cause.errno))))" }
        if error.code == .locked, let pid = error.lockHolderPID, !error.message.contains("\(pid)") {
            text += " (held by pid \(pid))"
        }
        return text
    }
}
