import Foundation
import Glibc
import Synchronization
@testable import BeaconLog

/// The real file system with scriptable faults and a journal of every call, injected through
/// `Configuration.fileSystem`.
///
/// A ``Fault`` fails one kind of operation with an `errno`, on every matching call or on the k-th
/// one, optionally only for paths containing a pattern. Writes can also run out of space after a
/// byte budget (``spaceLeft``): the bytes that fit are written, then `ENOSPC` is thrown, which is
/// what a short `write(2)` followed by a failing one looks like to the caller.
final class FaultyFileSystem: FileSystem, Sendable {
    enum Operation: String, Sendable, CaseIterable {
        case open, write, pwrite, read, sync, syncData, truncate, size, close, lock, rename, remove, syncDirectory, list, fileSize, makeDirectory
    }

    struct Fault: Sendable {
        var operation: Operation
        var errno: Int32
        /// Only calls whose path contains this fail (nil: any path).
        var pathContains: String?
        /// Only the k-th matching call fails (1-based; nil: every matching call while `times` lasts).
        var onCall: Int?
        /// How many more times the fault fires (nil: unlimited).
        var times: Int?
        /// For writes: write this many bytes of the buffer before failing (a short write).
        var afterBytes: Int?
        var seen = 0
    }

    /// One call, in the order made.
    struct Call: Sendable, CustomStringConvertible {
        var operation: Operation
        var path: String
        var bytes: Int
        var failed: Bool
        var description: String { "\(operation) \((path as NSString).lastPathComponent) \(bytes)\(failed ? " FAILED" : "")" }
    }

    private struct Script: Sendable {
        var faults: [Fault] = []
        var journal: [Call] = []
        var spaceLeft: Int?
        var skipSyncs = false
    }

    let base = SystemFileSystem()
    private let script = Mutex(Script())

    init() {}

    // MARK: Scripting

    /// Adds a fault.
    func inject(_ operation: Operation, errno: Int32, path: String? = nil, onCall: Int? = nil, times: Int? = nil, afterBytes: Int? = nil) {
        script.withLock { $0.faults.append(Fault(operation: operation, errno: errno, pathContains: path, onCall: onCall, times: times, afterBytes: afterBytes)) }
    }

    /// Removes every fault (and the space budget).
    func clearFaults() {
        script.withLock {
            $0.faults = []
            $0.spaceLeft = nil
        }
    }

    /// Bytes writes may still add before `ENOSPC` (nil: unlimited). Pwrites to the checkpoint count too.
    var spaceLeft: Int? {
        get { script.withLock { $0.spaceLeft } }
        set { script.withLock { $0.spaceLeft = newValue } }
    }

    /// When true, fsync, fdatasync and directory fsyncs succeed without reaching the disk: for
    /// sweeps that test recovery logic, not durability, and run thousands of opens.
    var skipSyncs: Bool {
        get { script.withLock { $0.skipSyncs } }
        set { script.withLock { $0.skipSyncs = newValue } }
    }

    /// Every call so far.
    var journal: [Call] { script.withLock { $0.journal } }

    func resetJournal() { script.withLock { $0.journal = [] } }

    /// Calls of `operation` (whose path contains `path`, if given).
    func calls(_ operation: Operation, path: String? = nil) -> [Call] {
        journal.filter { $0.operation == operation && (path == nil || $0.path.contains(path!)) }
    }

    // MARK: Fault decisions

    /// Records the call and returns the errno to fail it with, if a fault fires.
    private func check(_ operation: Operation, _ path: String, bytes: Int = 0) -> (errno: Int32, afterBytes: Int?)? {
        script.withLock { s in
            var hit: (Int32, Int?)?
            for i in s.faults.indices where s.faults[i].operation == operation {
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

    func open(_ path: String, _ mode: OpenMode) throws -> LogFile {
        if let f = check(.open, path) { throw fail(f.errno, path, "open") }
        return try base.open(path, mode)
    }

    func write(_ file: LogFile, _ bytes: UnsafeRawBufferPointer) throws {
        try faultyWrite(.write, file, bytes) { try base.write(file, $0) }
    }

    func write(_ file: LogFile, _ bytes: UnsafeRawBufferPointer, at offset: UInt64) throws {
        try faultyWrite(.pwrite, file, bytes) { try base.write(file, $0, at: offset) }
    }

    /// A write that may fail (an injected fault) or be cut short (the space budget runs out):
    /// the bytes that fit are written through `write`, then the error is thrown.
    private func faultyWrite(_ operation: Operation, _ file: LogFile, _ bytes: UnsafeRawBufferPointer, _ write: (UnsafeRawBufferPointer) throws -> Void) throws {
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
        if fits > 0 { try write(UnsafeRawBufferPointer(rebasing: bytes[0..<fits])) }
        if let error { throw fail(error, file.path, operation.rawValue) }
    }

    func read(_ file: LogFile, into buffer: UnsafeMutableRawBufferPointer, at offset: UInt64) throws -> Int {
        if let f = check(.read, file.path, bytes: buffer.count) { throw fail(f.errno, file.path, "pread") }
        let n = try base.read(file, into: buffer, at: offset)
        script.withLock { s in s.journal[s.journal.count - 1].bytes = n }
        return n
    }

    func sync(_ file: LogFile) throws {
        if let f = check(.sync, file.path) { throw fail(f.errno, file.path, "fsync") }
        if skipSyncs { return }
        try base.sync(file)
    }

    func syncData(_ file: LogFile) throws {
        if let f = check(.syncData, file.path) { throw fail(f.errno, file.path, "fdatasync") }
        if skipSyncs { return }
        try base.syncData(file)
    }

    func truncate(_ file: LogFile, to size: UInt64) throws {
        if let f = check(.truncate, file.path, bytes: Int(size)) { throw fail(f.errno, file.path, "ftruncate") }
        try base.truncate(file, to: size)
    }

    func size(_ file: LogFile) throws -> UInt64 {
        if let f = check(.size, file.path) { throw fail(f.errno, file.path, "fstat") }
        return try base.size(file)
    }

    func close(_ file: LogFile) {
        _ = check(.close, file.path)
        base.close(file)
    }

    func tryLock(_ file: LogFile) throws -> Bool {
        if let f = check(.lock, file.path) { throw fail(f.errno, file.path, "flock") }
        return try base.tryLock(file)
    }

    func rename(_ from: String, to: String) throws {
        if let f = check(.rename, from) { throw fail(f.errno, from, "rename") }
        try base.rename(from, to: to)
    }

    func remove(_ path: String) throws {
        if let f = check(.remove, path) { throw fail(f.errno, path, "unlink") }
        try base.remove(path)
    }

    func syncDirectory(_ path: String) throws {
        if let f = check(.syncDirectory, path) { throw fail(f.errno, path, "fsync") }
        if skipSyncs { return }
        try base.syncDirectory(path)
    }

    func list(_ directory: String) throws -> [String] {
        if let f = check(.list, directory) { throw fail(f.errno, directory, "opendir") }
        return try base.list(directory)
    }

    func fileSize(_ path: String) throws -> UInt64? {
        if let f = check(.fileSize, path) { throw fail(f.errno, path, "stat") }
        return try base.fileSize(path)
    }

    func makeDirectory(_ path: String) throws -> Bool {
        if let f = check(.makeDirectory, path) { throw fail(f.errno, path, "mkdir") }
        return try base.makeDirectory(path)
    }
}

/// A configuration using `fs`.
func faultyConfig(_ dir: String, _ fs: FaultyFileSystem, durability: BeaconLog.Durability = .everyRecord, segmentBytes: Int = 4096, maxBytes: Int64 = 1 << 20) -> BeaconLog.Configuration {
    var c = smallConfig(dir, durability: durability, segmentBytes: segmentBytes, maxBytes: maxBytes)
    c.fileSystem = fs
    return c
}

/// A configuration whose fsyncs succeed without reaching the disk: for tests of logic other than
/// durability (quota, rolls, sweeps), which then run without waiting on the disk.
func fastConfig(_ dir: String, durability: BeaconLog.Durability = .everyRecord, segmentBytes: Int = 4096, maxBytes: Int64 = 1 << 20) -> BeaconLog.Configuration {
    let fs = FaultyFileSystem()
    fs.skipSyncs = true
    return faultyConfig(dir, fs, durability: durability, segmentBytes: segmentBytes, maxBytes: maxBytes)
}
