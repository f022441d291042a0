import Foundation
import Glibc
import Synchronization
import BeaconLog

/// The real file system with scriptable faults and a journal of every call, injected through
/// `Configuration.fileSystem`.
///
/// A ``Fault`` fails one kind of operation with an `errno`, on every matching call or on the k-th
/// one, optionally only for paths containing a pattern. Writes can also run out of space after a
/// byte budget (``spaceLeft``): the bytes that fit are written, then `ENOSPC` is thrown, which is
/// what a short `write(2)` followed by a failing one looks like to the caller.
package final class FaultyFileSystem: FileSystem, Sendable {
    package enum Operation: String, Sendable, CaseIterable {
        case open, write, pwrite, read, sync, syncData, truncate, preallocate, writeback, size, close, lock, rename, remove, syncDirectory, list, fileSize, makeDirectory, status
    }

    package struct Fault: Sendable {
        /// The kind of call that fails (nil: any kind).
        package var operation: Operation?
        package var errno: Int32
        /// Only calls whose path contains this fail (nil: any path).
        package var pathContains: String?
        /// Only the k-th matching call fails (1-based; nil: every matching call while `times` lasts).
        package var onCall: Int?
        /// How many more times the fault fires (nil: unlimited).
        package var times: Int?
        /// For writes: write this many bytes of the buffer before failing (a short write).
        package var afterBytes: Int?
        package var seen = 0
    }

    /// One call, in the order made.
    package struct Call: Sendable, CustomStringConvertible {
        package var operation: Operation
        package var path: String
        package var bytes: Int
        package var failed: Bool
        package var description: String { "\(operation) \((path as NSString).lastPathComponent) \(bytes)\(failed ? " FAILED" : "")" }
    }

    private struct Script: Sendable {
        var faults: [Fault] = []
        var journal: [Call] = []
        var recording = false
        var recorded: [RecordedOperation] = []
        var spaceLeft: Int?
        var skipSyncs = false
        var beforeCall: (@Sendable (Operation, String) -> Void)?
    }

    /// The file system the calls go to: the real one, or another seam (a `StallingFileSystem`,
    /// whose stalls ``beforeCall`` then sees begin).
    package let base: any FileSystem
    private let script = Mutex(Script())

    package init(base: any FileSystem = SystemFileSystem()) {
        self.base = base
    }

    // MARK: Scripting

    /// Adds a fault: calls of `operation` (nil: of any kind) on paths containing `path` fail with
    /// `errno`, all of them, the `onCall`-th one, or `times` of them.
    package func inject(_ operation: Operation?, errno: Int32, path: String? = nil, onCall: Int? = nil, times: Int? = nil, afterBytes: Int? = nil) {
        script.withLock { $0.faults.append(Fault(operation: operation, errno: errno, pathContains: path, onCall: onCall, times: times, afterBytes: afterBytes)) }
    }

    /// Removes every fault (and the space budget).
    package func clearFaults() {
        script.withLock {
            $0.faults = []
            $0.spaceLeft = nil
        }
    }

    /// Bytes writes may still add before `ENOSPC` (nil: unlimited). Pwrites to the checkpoint count too.
    package var spaceLeft: Int? {
        get { script.withLock { $0.spaceLeft } }
        set { script.withLock { $0.spaceLeft = newValue } }
    }

    /// When true, fsync, fdatasync and directory fsyncs succeed without reaching the disk: for
    /// sweeps that test recovery logic, not durability, and run thousands of opens.
    package var skipSyncs: Bool {
        get { script.withLock { $0.skipSyncs } }
        set { script.withLock { $0.skipSyncs = newValue } }
    }

    /// Called before each call with its kind and path, on the caller's thread: a test can block
    /// there to force an interleaving of two threads.
    package var beforeCall: (@Sendable (Operation, String) -> Void)? {
        get { script.withLock { $0.beforeCall } }
        set { script.withLock { $0.beforeCall = newValue } }
    }

    /// When true, every change the calls make to the file system (creations, written bytes,
    /// truncations, fsyncs, renames, removals, new directories, directory fsyncs) is kept in
    /// ``recorded``, in order, with the test's ``mark(_:)``s between them: what `CrashStates`
    /// replays.
    package var recording: Bool {
        get { script.withLock { $0.recording } }
        set { script.withLock { $0.recording = newValue } }
    }

    /// The changes recorded so far.
    package var recorded: [RecordedOperation] { script.withLock { $0.recorded } }

    /// Records what the workload just learned from the API (a record appended, made durable,
    /// acknowledged) between the file-system changes.
    package func mark(_ marker: RecordedOperation.Marker) {
        record(.mark(marker))
    }

    private func record(_ operation: @autoclosure () -> RecordedOperation) {
        script.withLock { s in if s.recording { s.recorded.append(operation()) } }
    }

    private var isRecording: Bool { script.withLock { $0.recording } }

    /// Every call so far.
    package var journal: [Call] { script.withLock { $0.journal } }

    package func resetJournal() { script.withLock { $0.journal = [] } }

    /// Calls of `operation` (whose path contains `path`, if given).
    package func calls(_ operation: Operation, path: String? = nil) -> [Call] {
        journal.filter { $0.operation == operation && (path == nil || $0.path.contains(path!)) }
    }

    // MARK: Fault decisions

    /// Records the call and returns the errno to fail it with, if a fault fires.
    private func check(_ operation: Operation, _ path: String, bytes: Int = 0) -> (errno: Int32, afterBytes: Int?)? {
        script.withLock { $0.beforeCall }?(operation, path)
        return script.withLock { s in
            var hit: (Int32, Int?)?
            for i in s.faults.indices where s.faults[i].operation == nil || s.faults[i].operation == operation {
                if let pattern = s.faults[i].pathContains, !path.contains(pattern) { continue }
                s.faults[i].seen += 1
                if hit != nil { continue }
                if let k = s.faults[i].onCall, s.faults[i].seen != k { continue }
                if let times = s.faults[i].times {
                    if times <= 0 { continue }
                    s.faults[i].times = times - 1
                }
                hit = (s.faults[i].errno, s.faults[i].afterBytes)
            }
            s.journal.append(Call(operation: operation, path: path, bytes: bytes, failed: hit != nil))
            return hit
        }
    }

    /// How much of a write of `count` bytes fits in the space budget; consumes it.
    private func takeSpace(_ count: Int) -> Int {
        script.withLock { s in
            guard let left = s.spaceLeft else { return count }
            let n = min(left, count)
            s.spaceLeft = left - n
            return n
        }
    }

    private func fail(_ e: Int32, _ path: String, _ operation: String) -> BeaconLogError {
        BeaconLogError.system(e, path: path, operation: operation)
    }

    private func markLastFailed() {
        script.withLock { s in
            if !s.journal.isEmpty { s.journal[s.journal.count - 1].failed = true }
        }
    }

    // MARK: FileSystem

    package func open(_ file: LogPath, _ mode: OpenMode) throws -> LogFile {
        let path = file.path
        if let f = check(.open, path) { throw fail(f.errno, path, "open") }
        let creates = isRecording && mode != .read && mode != .readWrite && (try? base.fileSize(file)) == .some(nil)
        let file = try base.open(file, mode)
        if creates { record(.create(path)) }
        return file
    }

    package func write(_ file: LogFile, _ bytes: UnsafeRawBufferPointer) throws {
        let offset = isRecording ? UInt64(max(0, lseek(file.descriptor, 0, SEEK_CUR))) : 0
        try faultyWrite(.write, file, bytes, offset: offset) { try base.write(file, $0) }
    }

    package func write(_ file: LogFile, _ bytes: UnsafeRawBufferPointer, at offset: UInt64) throws {
        try faultyWrite(.pwrite, file, bytes, offset: offset) { try base.write(file, $0, at: offset) }
    }

    /// A write that may fail (an injected fault) or be cut short (the space budget runs out):
    /// the bytes that fit are written through `write`, then the error is thrown.
    private func faultyWrite(_ operation: Operation, _ file: LogFile, _ bytes: UnsafeRawBufferPointer, offset: UInt64, _ write: (UnsafeRawBufferPointer) throws -> Void) throws {
        var limit = bytes.count
        var error: Int32?
        if let f = check(operation, file.path, bytes: bytes.count) {
            error = f.errno
            limit = min(limit, f.afterBytes ?? 0)
        }
        let fits = takeSpace(limit)
        if fits < limit {
            error = ENOSPC
            markLastFailed()
        }
        if fits > 0 {
            let written = UnsafeRawBufferPointer(rebasing: bytes[0..<fits])
            try write(written)
            record(.write(file.path, offset: offset, bytes: Array(written)))
        }
        if let error { throw fail(error, file.path, operation.rawValue) }
    }

    package func read(_ file: LogFile, into buffer: UnsafeMutableRawBufferPointer, at offset: UInt64) throws -> Int {
        if let f = check(.read, file.path, bytes: buffer.count) { throw fail(f.errno, file.path, "pread") }
        let n = try base.read(file, into: buffer, at: offset)
        script.withLock { s in s.journal[s.journal.count - 1].bytes = n }
        return n
    }

    package func sync(_ file: LogFile) throws {
        if let f = check(.sync, file.path) { throw fail(f.errno, file.path, "fsync") }
        if !skipSyncs { try base.sync(file) }
        record(.sync(file.path))
    }

    package func syncData(_ file: LogFile) throws {
        if let f = check(.syncData, file.path) { throw fail(f.errno, file.path, "fdatasync") }
        if !skipSyncs { try base.syncData(file) }
        record(.sync(file.path))
    }

    package func truncate(_ file: LogFile, to size: UInt64) throws {
        if let f = check(.truncate, file.path, bytes: Int(size)) { throw fail(f.errno, file.path, "ftruncate") }
        try base.truncate(file, to: size)
        record(.truncate(file.path, size: size))
    }

    /// Fails like `fallocate(2)` when a fault says so (`EOPNOTSUPP`, `ENOSPC`...); recorded as the
    /// file growing to `size` with zeros, which is what a crash state sees of it.
    package func preallocate(_ file: LogFile, size: UInt64) throws {
        if let f = check(.preallocate, file.path, bytes: Int(size)) { throw fail(f.errno, file.path, "fallocate") }
        let before = isRecording ? try base.size(file) : 0
        try base.preallocate(file, size: size)
        if isRecording && size > before { record(.truncate(file.path, size: size)) }
    }

    /// Advisory, so a fault makes it do nothing; changes nothing a crash state sees.
    package func startWriteback(_ file: LogFile, offset: UInt64, length: UInt64) {
        if check(.writeback, file.path, bytes: Int(length)) != nil { return }
        base.startWriteback(file, offset: offset, length: length)
    }

    package func size(_ file: LogFile) throws -> UInt64 {
        if let f = check(.size, file.path) { throw fail(f.errno, file.path, "fstat") }
        return try base.size(file)
    }

    package func close(_ file: LogFile) {
        _ = check(.close, file.path)
        base.close(file)
    }

    package func tryLock(_ file: LogFile) throws -> Bool {
        if let f = check(.lock, file.path) { throw fail(f.errno, file.path, "flock") }
        return try base.tryLock(file)
    }

    package func unlock(_ file: LogFile) {
        base.unlock(file)
    }

    package func rename(_ from: LogPath, to: LogPath) throws {
        if let f = check(.rename, from.path) { throw fail(f.errno, from.path, "rename") }
        try base.rename(from, to: to)
        record(.rename(from.path, to.path))
    }

    package func remove(_ file: LogPath) throws {
        let path = file.path
        if let f = check(.remove, path) { throw fail(f.errno, path, "unlink") }
        let exists = isRecording && (try? base.fileSize(file)) != .some(nil)
        try base.remove(file)
        if exists { record(.remove(path)) }
    }

    package func syncDirectory(_ directory: LogDirectory) throws {
        let path = directory.path
        if let f = check(.syncDirectory, path) { throw fail(f.errno, path, "fsync") }
        if !skipSyncs { try base.syncDirectory(directory) }
        record(.syncDirectory(path))
    }

    package func syncDirectory(_ path: String) throws {
        if let f = check(.syncDirectory, path) { throw fail(f.errno, path, "fsync") }
        if !skipSyncs { try base.syncDirectory(path) }
        record(.syncDirectory(path))
    }

    package func list(_ directory: LogDirectory) throws -> [String] {
        if let f = check(.list, directory.path) { throw fail(f.errno, directory.path, "opendir") }
        return try base.list(directory)
    }

    package func fileSize(_ file: LogPath) throws -> UInt64? {
        if let f = check(.fileSize, file.path) { throw fail(f.errno, file.path, "stat") }
        return try base.fileSize(file)
    }

    package func status(_ directory: LogDirectory) throws -> DirectoryStatus {
        if let f = check(.status, directory.path) { throw fail(f.errno, directory.path, "fstat") }
        return try base.status(directory)
    }

    package func makeDirectory(_ path: String) throws -> Bool {
        if let f = check(.makeDirectory, path) { throw fail(f.errno, path, "mkdir") }
        let created = try base.makeDirectory(path)
        if created { record(.mkdir(path)) }
        return created
    }
}
