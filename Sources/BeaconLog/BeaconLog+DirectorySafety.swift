import Glibc

extension BeaconLog {
    /// Who besides the process's own user may write the log directory: what ``BeaconLog``
    /// checks when it opens a directory, before it touches any file in it.
    ///
    /// Whoever can write a directory can replace the files in it. Beacon opens every file of the
    /// log without following links (a link is refused with ``BeaconLogError/Code/linkedFile``), but
    /// a user who may create files in the directory could still plant segments or a checkpoint that
    /// Beacon would read as its own, or remove the log. So, as PostgreSQL does for its data
    /// directory and OpenSSH's `StrictModes` for `~/.ssh`, the directory must be safe before it is
    /// used:
    ///
    /// | sharing | owner | group may write | others may write |
    /// |---|---|---|---|
    /// | ``owner`` (default) | this process's effective user | no | no |
    /// | ``group`` | any user | yes | no |
    ///
    /// Others may never write it, with or without the sticky bit (mode 1777, as `/tmp`): the
    /// sticky bit stops others from removing or renaming Beacon's files, not from creating the
    /// next segment or a checkpoint first. Use a directory of its own inside `/tmp` or
    /// `/var/tmp`, never the shared directory itself. Read permission for the group or others is
    /// allowed (the files themselves are mode 0600).
    ///
    /// ```swift
    /// var configuration = BeaconLog.Configuration(directory: "/shared/beacon")  // mode 2770, group "app"
    /// configuration.sharing = .group
    /// ```
    public enum DirectorySharing: Sendable, Hashable {
        /// The directory belongs to the user the process runs as (its effective uid) and neither
        /// its group nor others may write it: mode 0700 (what Beacon creates), 0750 or 0755.
        case owner
        /// A volume shared by the members of a group, say a service and its sidecar running as
        /// two users of one group: the group may write the directory (mode 0770, or 2770 so new
        /// files take the directory's group) and it may belong to another user. Others still may
        /// not write it. Every member of the group is trusted with the log.
        case group
    }

    /// What is unsafe about a log directory with `status`, for a process whose effective uid is
    /// `user`, or nil when it may be used: the message of a ``BeaconLogError/Code/unsafeDirectory``
    /// error, naming the command that fixes it.
    static func unsafeDirectoryProblem(_ status: DirectoryStatus, path: String, user: UInt32, sharing: DirectorySharing) -> String? {
        let mode = status.mode & 0o7777
        let modeText = "mode " + String(mode, radix: 8).leftPadded(to: 4)
        let fix = "chmod 700 \(shellQuoted(path))"
        if mode & 0o002 != 0 {
            let sticky = mode & 0o1000 != 0
                ? " (the sticky bit does not help: it stops others from removing Beacon's files, not from creating the next segment or a checkpoint first)"
                : ""
            return "the log directory \(path) can be written by every user (\(modeText))\(sticky), who could replace its files or plant a segment or checkpoint Beacon would read; run \(fix), or use a directory of its own inside it"
        }
        if sharing == .owner && mode & 0o020 != 0 {
            return "the log directory \(path) can be written by its group (\(modeText)), whose members could replace its files; run \(fix), or, if the directory is shared with a group on purpose, set the log's configuration sharing = .group"
        }
        if sharing == .owner && status.owner != user {
            return "the log directory \(path) belongs to uid \(status.owner), not to the user this process runs as (uid \(user)), and its owner could replace its files; run chown \(user) \(shellQuoted(path)) (or run as uid \(status.owner)), or, if the directory is shared with a group on purpose, set the log's configuration sharing = .group"
        }
        return nil
    }

    /// Throws ``BeaconLogError/Code/unsafeDirectory`` if `directory` may not be used with `sharing`.
    static func checkDirectorySafety(_ directory: LogDirectory, fs: any FileSystem, sharing: DirectorySharing) throws {
        let status = try fs.status(directory)
        if let problem = unsafeDirectoryProblem(status, path: directory.path, user: geteuid(), sharing: sharing) {
            throw BeaconLogError(.unsafeDirectory, problem, path: directory.path)
        }
    }
}

extension String {
    /// This string with zeros in front up to `width` characters.
    fileprivate func leftPadded(to width: Int) -> String {
        count >= width ? self : String(repeating: "0", count: width - count) + self
    }
}
