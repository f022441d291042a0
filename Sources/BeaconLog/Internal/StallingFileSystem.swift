import Glibc

/// A file system whose fsyncs wait while a control file exists: a stalled disk, made without
/// root, for tests from outside (the service example's state-change test). Every other call goes
/// straight to `base`. Never for production: a stall it makes is as real as a disk's.
///
/// ```swift
/// config.fileSystem = StallingFileSystem(base: SystemFileSystem(), controlFile: "/tmp/stall")
/// // touch /tmp/stall: every fsync waits; rm /tmp/stall: they complete
/// ```
package struct StallingFileSystem: FileSystem {
    package let base: any FileSystem
    /// While a file exists at this path, `fsync(2)`, `fdatasync(2)` and directory syncs wait.
    package let controlFile: String

    package init(base: any FileSystem, controlFile: String) {
        self.base = base
        self.controlFile = controlFile
    }

    /// Polls the control file every 10 ms (`access(2)`) until it is gone.
    private func waitWhileStalled() {
        while access(controlFile, F_OK) == 0 { usleep(10_000) }
    }

    package func sync(_ file: LogFile) throws {
        waitWhileStalled()
        try base.sync(file)
    }

    package func syncData(_ file: LogFile) throws {
        waitWhileStalled()
        try base.syncData(file)
    }

    package func syncDirectory(_ directory: LogDirectory) throws {
        waitWhileStalled()
        try base.syncDirectory(directory)
    }

    package func syncDirectory(_ path: String) throws {
        waitWhileStalled()
        try base.syncDirectory(path)
    }

    package func open(_ file: LogPath, _ mode: OpenMode) throws -> LogFile { try base.open(file, mode) }
    package func write(_ file: LogFile, _ bytes: UnsafeRawBufferPointer) throws { try base.write(file, bytes) }
    package func write(_ file: LogFile, _ bytes: UnsafeRawBufferPointer, at offset: UInt64) throws { try base.write(file, bytes, at: offset) }
    package func read(_ file: LogFile, into buffer: UnsafeMutableRawBufferPointer, at offset: UInt64) throws -> Int { try base.read(file, into: buffer, at: offset) }
    package func truncate(_ file: LogFile, to size: UInt64) throws { try base.truncate(file, to: size) }
    package func preallocate(_ file: LogFile, size: UInt64) throws { try base.preallocate(file, size: size) }
    package func startWriteback(_ file: LogFile, offset: UInt64, length: UInt64) { base.startWriteback(file, offset: offset, length: length) }
    package func size(_ file: LogFile) throws -> UInt64 { try base.size(file) }
    package func close(_ file: LogFile) { base.close(file) }
    package func tryLock(_ file: LogFile) throws -> Bool { try base.tryLock(file) }
    package func unlock(_ file: LogFile) { base.unlock(file) }
    package func rename(_ from: LogPath, to: LogPath) throws { try base.rename(from, to: to) }
    package func remove(_ file: LogPath) throws { try base.remove(file) }
    package func list(_ directory: LogDirectory) throws -> [String] { try base.list(directory) }
    package func fileSize(_ file: LogPath) throws -> UInt64? { try base.fileSize(file) }
    package func status(_ directory: LogDirectory) throws -> DirectoryStatus { try base.status(directory) }
    package func makeDirectory(_ path: String) throws -> Bool { try base.makeDirectory(path) }
}
