import Foundation
import Glibc
import Synchronization
import Testing
@testable import BeaconLog
import FaultInjection

/// A reader in another process beside a live writer, modelled at page granularity: the writer's
/// recorded changes are replayed one step at a time (each `write(2)` split at page boundaries, as
/// the kernel copies it), and the reader's every `pread` copies page by page with the writer
/// advancing `stride` steps before each page, so one read can see a later page already written
/// and an earlier one still zeros (preallocated) or half written. Every start point of the reader
/// (every step of the history), two strides, every durability mode: the reader reads every record
/// once, in order, and passes over nothing. On ef2d39b the reader counted torn views as corrupt
/// (`zeros`, `malformed`, `checksum`) and lost the records under them.
@Suite struct LiveReaderTests {
    enum Mode: String, CaseIterable, Sendable {
        case everyRecord, batched, alignedNone
    }

    /// One step of the writer's history as another process sees it.
    enum Step {
        case create(String)
        case write(String, offset: UInt64, bytes: [UInt8])
        case truncate(String, size: UInt64)
        case rename(String, String)
        case remove(String)
    }

    static let page = 4096

    /// The writer's recorded changes as steps on the paths under `destination`, writes cut at
    /// page boundaries.
    static func steps(_ recorded: [RecordedOperation], from source: String, to destination: String) -> [Step] {
        func moved(_ path: String) -> String { destination + path.dropFirst(source.count) }
        var steps: [Step] = []
        for operation in recorded {
            switch operation {
            case .create(let p): steps.append(.create(moved(p)))
            case .write(let p, let offset, let bytes):
                var at = 0
                while at < bytes.count {
                    let fileOffset = Int(offset) + at
                    let end = min(bytes.count, at + (page - fileOffset % page))
                    steps.append(.write(moved(p), offset: UInt64(fileOffset), bytes: Array(bytes[at..<end])))
                    at = end
                }
            case .truncate(let p, let size): steps.append(.truncate(moved(p), size: size))
            case .rename(let a, let b): steps.append(.rename(moved(a), moved(b)))
            case .remove(let p): steps.append(.remove(moved(p)))
            case .sync, .syncDirectory, .mkdir, .mark: break
            }
        }
        return steps
    }

    /// The reader's file system: the real one on the replayed directory, which the writer's
    /// history advances as the reader makes calls. `writer.lock` reads as held until the history
    /// (which ends with the writer's `close()`) is replayed whole.
    final class ReplayingFileSystem: FileSystem, Sendable {
        let base = SystemFileSystem()
        let steps: [Step]
        let stride: Int
        let applied = Mutex(0)

        init(steps: [Step], stride: Int) {
            self.steps = steps
            self.stride = stride
        }

        var done: Bool { applied.withLock { $0 == steps.count } }

        func advance(_ count: Int) {
            applied.withLock { applied in
                for _ in 0..<count where applied < steps.count {
                    Self.apply(steps[applied])
                    applied += 1
                }
            }
        }

        static func apply(_ step: Step) {
            switch step {
            case .create(let p):
                let fd = Glibc.open(p, O_CREAT | O_RDWR, 0o600)
                if fd >= 0 { Glibc.close(fd) }
            case .write(let p, let offset, let bytes):
                let fd = Glibc.open(p, O_WRONLY)
                precondition(fd >= 0, "replaying a write to \(p): errno \(errno)")
                _ = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, off_t(offset)) }
                Glibc.close(fd)
            case .truncate(let p, let size): _ = Glibc.truncate(p, off_t(size))
            case .rename(let a, let b): _ = Glibc.rename(a, b)
            case .remove(let p): _ = unlink(p)
            }
        }

        func open(_ path: LogPath, _ mode: OpenMode) throws -> LogFile { try base.open(path, mode) }
        func write(_ file: LogFile, _ bytes: UnsafeRawBufferPointer) throws { try base.write(file, bytes) }
        func write(_ file: LogFile, _ bytes: UnsafeRawBufferPointer, at offset: UInt64) throws { try base.write(file, bytes, at: offset) }

        /// Page by page, the writer advancing before each page.
        func read(_ file: LogFile, into buffer: UnsafeMutableRawBufferPointer, at offset: UInt64) throws -> Int {
            var done = 0
            while done < buffer.count {
                let at = Int(offset) + done
                let count = min(buffer.count - done, LiveReaderTests.page - at % LiveReaderTests.page)
                advance(stride)
                let n = try base.read(file, into: UnsafeMutableRawBufferPointer(rebasing: buffer[done..<(done + count)]), at: UInt64(at))
                done += n
                if n < count { break }
            }
            return done
        }

        func sync(_ file: LogFile) throws {}
        func syncData(_ file: LogFile) throws {}
        func truncate(_ file: LogFile, to size: UInt64) throws { try base.truncate(file, to: size) }
        func preallocate(_ file: LogFile, size: UInt64) throws { try base.preallocate(file, size: size) }
        func startWriteback(_ file: LogFile, offset: UInt64, length: UInt64) {}
        func size(_ file: LogFile) throws -> UInt64 {
            advance(1)
            return try base.size(file)
        }
        func close(_ file: LogFile) { base.close(file) }
        func tryLock(_ file: LogFile) throws -> Bool {
            if file.path.hasSuffix("/writer.lock") { return done }
            return try base.tryLock(file)
        }
        func unlock(_ file: LogFile) { base.unlock(file) }
        func rename(_ from: LogPath, to: LogPath) throws { try base.rename(from, to: to) }
        func remove(_ path: LogPath) throws { try base.remove(path) }
        func syncDirectory(_ directory: LogDirectory) throws {}
        func syncDirectory(_ path: String) throws {}
        func list(_ directory: LogDirectory) throws -> [String] {
            advance(1)
            return try base.list(directory)
        }
        func fileSize(_ path: LogPath) throws -> UInt64? {
            advance(1)
            return try base.fileSize(path)
        }
        func status(_ directory: LogDirectory) throws -> DirectoryStatus { try base.status(directory) }
        func makeDirectory(_ path: String) throws -> Bool { try base.makeDirectory(path) }
    }

    /// Records of 150 to 450 bytes: frames end at every offset of a page.
    static func record(_ i: Int) -> String { numbered(i, pad: 120 + (i * 97) % 301) }

    /// Runs the writer's workload on `dir` and returns the files it had before appending and
    /// the changes it made (ending with `close()`).
    static func recordWriter(_ mode: Mode, dir: String, count: Int) throws -> (files: [String: [UInt8]], recorded: [RecordedOperation]) {
        let fs = FaultyFileSystem()
        fs.skipSyncs = true
        let durability: BeaconLog.Durability = switch mode {
        case .everyRecord: .everyRecord
        case .batched: .batched(records: 1000, interval: .seconds(3600))
        case .alignedNone: .none
        }
        var config = faultyConfig(dir, fs, durability: durability, segmentBytes: 64 * 1024, maxBytes: 64 << 20)
        config.access = .write
        let writer = try BeaconLog(configuration: config)
        var files: [String: [UInt8]] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: dir) {
            files[name] = try fileBytes(dir + "/" + name)
        }
        fs.recording = true
        for i in 0..<count {
            try writer.append(record(i))
            if mode == .batched && i % 9 == 8 { try writer.commit(sync: true) }
        }
        try writer.close()
        fs.recording = false
        return (files, fs.recorded)
    }

    @Test("a reader in another process, at every step of a live writer's history and every page of its reads, reads every record once and passes over nothing", arguments: Mode.allCases)
    func aReaderNeverPassesOverALiveWritersData(mode: Mode) throws {
        // About 110 KB with .none's 64 KiB aligned writes in one segment (no preallocation), in
        // two preallocated 64 KiB segments otherwise.
        let count = mode == .alignedNone ? 400 : 330
        try withTemporaryDirectory { root in
            let source = root + "/writer"
            let (files, recorded) = try Self.recordWriter(mode, dir: source, count: count)
            let replayed = root + "/reader"
            let steps = Self.steps(recorded, from: source, to: replayed)
            if mode != .alignedNone {
                #expect(steps.contains { if case .truncate(_, let size) = $0 { size == 64 * 1024 } else { false } }, "the segments are preallocated")
            }
            var failures = 0
            for stride in [2, 7] {
                for start in 0...steps.count {
                    try? FileManager.default.removeItem(atPath: replayed)
                    try FileManager.default.createDirectory(atPath: replayed, withIntermediateDirectories: false)
                    for (name, bytes) in files { try writeFile(replayed + "/" + name, bytes) }
                    let fs = ReplayingFileSystem(steps: steps, stride: stride)
                    fs.advance(start)
                    var config = BeaconLog.Configuration(directory: replayed)
                    config.access = .read
                    config.segmentBytes = 64 * 1024
                    config.fileSystem = fs
                    let reader = try BeaconLog(configuration: config)
                    var seqs: [UInt64] = []
                    var skipped = 0
                    var cursor: LogPosition?
                    var emptyAtEnd = 0
                    while emptyAtEnd < 2 && seqs.count <= count {
                        let batch = try reader.read(from: cursor, maxRecords: 64)
                        skipped += batch.skippedCorrupt
                        seqs += batch.seqs
                        cursor = batch.end
                        if batch.isEmpty {
                            if fs.done { emptyAtEnd += 1 }
                            fs.advance(stride)
                        }
                    }
                    try reader.close()
                    if seqs != Array(0..<UInt64(count)) || skipped != 0 {
                        failures += 1
                        if failures <= 3 {
                            let missing = Set(0..<UInt64(count)).subtracting(seqs).count
                            Issue.record("\(mode), stride \(stride), reader starting after step \(start) of \(steps.count): read \(seqs.count) records (\(missing) missing), \(skipped) passed over as corrupt \(reader.stats.skippedCorruptByReason)")
                        }
                    }
                }
            }
            #expect(failures == 0, "\(failures) of \(2 * (steps.count + 1)) interleavings lost records")
        }
    }
}
