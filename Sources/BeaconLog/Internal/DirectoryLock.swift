import Foundation
import Glibc

/// An exclusive `flock(2)` on `<dir>/writer.lock` or `<dir>/reader.lock`, held while the file stays open.
///
/// The holder writes its pid into the file so that a refused process can say who holds it.
package struct DirectoryLock: Sendable {
    package let file: LogFile

    /// Takes the lock or throws `.locked` naming the holder's pid.
    package static func acquire(_ kind: BeaconLog.LockKind, directory: LogDirectory, fileSystem: any FileSystem) throws -> DirectoryLock {
        let path = directory.file(kind.rawValue + ".lock")
        let file = try fileSystem.open(path, .createOrOpen)
        guard try tryLockBriefly(file, fileSystem: fileSystem) else {
            let pid = readPID(file, fileSystem: fileSystem)
            fileSystem.close(file)
            let holder = pid.map { "process \($0)" } ?? "another process"
            throw BeaconLogError(
                .locked,
                "the log directory's \(kind.rawValue) lock is held by \(holder); only one \(kind.rawValue) may use a directory at a time. Stop the other process or use another directory",
                path: path.path, lockHolderPID: pid)
        }
        try fileSystem.truncate(file, to: 0)
        let text = Array("\(getpid())\n".utf8)
        try text.withUnsafeBytes { try fileSystem.write(file, $0, at: 0) }
        return DirectoryLock(file: file)
    }

    /// Tries the lock for up to ~200 ms. A process that another thread of ours is spawning holds a
    /// copy of every descriptor until its `exec` closes them (`O_CLOEXEC`), so a lock we released
    /// a moment ago can look held for that long; a real holder keeps it much longer.
    static func tryLockBriefly(_ file: LogFile, fileSystem: any FileSystem) throws -> Bool {
        for attempt in 0..<20 {
            if try fileSystem.tryLock(file) { return true }
            if attempt < 19 { usleep(10_000) }
        }
        return false
    }

    package static func readPID(_ file: LogFile, fileSystem: any FileSystem) -> Int32? {
        var bytes = [UInt8](repeating: 0, count: 32)
        let n = (try? bytes.withUnsafeMutableBytes { try fileSystem.read(file, into: $0, at: 0) }) ?? 0
        // The pid's line; `reader.lock` also holds the quota's drop mark further on (see DropExclusion).
        let text = String(decoding: bytes.prefix(n).prefix { $0 != 0 }, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
        return Int32(text)
    }

    /// Unlocks, then closes: a copy of the descriptor in a child being spawned would otherwise keep
    /// the lock until the child's `exec`, and this process's next open of the directory could
    /// find it held (by this process's own pid, under load for longer than ``tryLockBriefly``).
    package func release(fileSystem: any FileSystem) {
        fileSystem.unlock(file)
        fileSystem.close(file)
    }
}
