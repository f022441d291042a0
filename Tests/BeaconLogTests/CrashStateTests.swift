import Foundation
import Glibc
import Testing
@testable import BeaconLog
import BeaconTestSupport
import FaultInjection

/// Crash states of scripted workloads, explored the way ALICE (OSDI '14) and CrashMonkey
/// (OSDI '18) explore file systems and databases: each workload runs once on a recording file
/// system; then, for process crashes after any prefix of its changes and for power losses at its
/// sync boundaries (unsynced writes dropped, kept in part, cut at a sector, zero-filled; directory
/// entries kept only if their directory was fsynced after them), the directory is rebuilt, opened
/// and checked: what is read is a gap-free FIFO run of what was appended, starting at the
/// checkpoint; every record the API called durable is there; no record whose acknowledgement
/// returned is delivered again; the log takes new appends.
///
/// A sample of the states runs under `swift test`; `BEACON_CRASH_EXHAUSTIVE=1` runs every one
/// (see `Benchmarks/crash-states.sh`).
@Suite("Crash states of recorded workloads")
struct CrashStateTests {
    static let exhaustive = ProcessInfo.processInfo.environment["BEACON_CRASH_EXHAUSTIVE"] == "1"

    /// A scripted workload on `<root>/log`.
    struct Workload: Sendable, CustomStringConvertible {
        var name: String
        var durability: BeaconLog.Durability = .everyRecord
        var maxBytes: Int64 = 1 << 20
        /// Segments of 64 KiB or more are preallocated under `.everyRecord` and `.batched`.
        var segmentBytes = 4096
        /// The quota may delete the oldest records (counted as dropped): reading may start after the checkpoint.
        var dropsOldest = false
        /// The log directory exists (empty log, durable) before recording; false: the workload creates it.
        var directoryExists = true
        /// ``BeaconLog/Configuration/checkpointSyncInterval``: the default (1 s) writes
        /// acknowledgements lazily, nil makes each durable before it returns.
        var checkpointSyncInterval: Duration? = BeaconLog.Configuration(directory: "/").checkpointSyncInterval
        /// Records appended (and made durable) before recording, then damaged: returns them.
        var prepare: @Sendable (_ config: BeaconLog.Configuration) throws -> [String] = { _ in [] }
        var run: @Sendable (_ log: () throws -> BeaconLog, _ script: Script) throws -> Void

        var description: String { name }
    }

    /// The workload's calls, each followed by the marker of what the API promised.
    struct Script: Sendable {
        let fs: FaultyFileSystem
        /// The log directory: for a workload that opens a second instance (`access`) itself.
        var directory = ""

        /// Another instance on the workload's directory and file system, with `access`.
        func open(_ access: BeaconLog.Access, durability: BeaconLog.Durability) throws -> BeaconLog {
            var config = BeaconLog.Configuration(directory: directory)
            config.durability = durability
            config.segmentBytes = 4096
            config.fileSystem = fs
            config.access = access
            return try BeaconLog(configuration: config)
        }

        @discardableResult
        func append(_ log: BeaconLog, _ i: Int) throws -> UInt64 {
            let record = CrashStateTests.record(i)
            let seq = try log.append(record)
            fs.mark(.appended(seq: seq, record: Array(record.utf8)))
            if log.configuration.durability == .everyRecord { fs.mark(.durable(through: seq)) }
            return seq
        }

        func sync(_ log: BeaconLog) throws {
            try log.sync()
            markDurable(log)
        }

        func close(_ log: BeaconLog) throws {
            try log.close()
            markDurable(log)
        }

        func markDurable(_ log: BeaconLog) {
            let next = log.stats.nextSeq
            if next > 0 { fs.mark(.durable(through: next - 1)) }
        }

        func readAndAcknowledge(_ log: BeaconLog, _ count: Int) throws {
            let batch = try log.read(maxRecords: count)
            guard !batch.isEmpty else { return }
            fs.mark(.acknowledging(seq: batch.end.seq))
            try log.acknowledge(through: batch.end)
            fs.mark(.acknowledged(seq: batch.end.seq))
        }
    }

    static func record(_ i: Int) -> String {
        #"{"n":\#(i),"pad":"\#(String(repeating: "p", count: 60 + i % 7))"}"#
    }

    static func config(_ directory: String, _ workload: Workload, fs: any FileSystem) -> BeaconLog.Configuration {
        var config = BeaconLog.Configuration(directory: directory)
        config.durability = workload.durability
        config.segmentBytes = workload.segmentBytes
        config.maxBytes = workload.maxBytes
        config.checkpointSyncInterval = workload.checkpointSyncInterval
        config.fileSystem = fs
        return config
    }

    static let workloads: [Workload] = {
        var all: [Workload] = []
        let hour = Duration.seconds(3600)
        for (name, durability) in [("everyRecord", BeaconLog.Durability.everyRecord), ("batched", .batched(records: 8, interval: hour)), ("none", .none)] {
            all.append(Workload(name: "appends across a segment roll, \(name)", durability: durability) { open, script in
                let log = try open()
                for i in 0..<30 { try script.append(log, i) }
                try script.sync(log)
                for i in 30..<70 { try script.append(log, i) }
                try script.close(log)
            })
        }
        // Acknowledgements written lazily (the default: a power loss may deliver again those since
        // the checkpoint's last fdatasync), and each made durable at once.
        for interval in [BeaconLog.Configuration(directory: "/").checkpointSyncInterval, nil] {
            var workload = Workload(name: "read and acknowledge across segments" + (interval == nil ? ", each acknowledgement durable" : ""),
                                    durability: .batched(records: 4, interval: hour)) { open, script in
                let log = try open()
                for i in 0..<50 { try script.append(log, i) }
                try script.sync(log)
                for _ in 0..<4 { try script.readAndAcknowledge(log, 12) }
                for i in 50..<55 { try script.append(log, i) }
                try script.close(log)
            }
            workload.checkpointSyncInterval = interval
            all.append(workload)
        }
        // Lazily written acknowledgements inside one segment (no deletion makes one durable): a
        // power loss must find the slot of the last durable generation whole, whatever the
        // unsynced slot writes became.
        all.append(Workload(name: "acknowledgements written lazily within one segment", durability: .batched(records: 4, interval: hour),
                            segmentBytes: 32 << 10) { open, script in
            let log = try open()
            for i in 0..<50 { try script.append(log, i) }
            try script.sync(log)
            for k in 0..<8 {
                try script.readAndAcknowledge(log, 5)
                // A record fsync while the checkpoint's slot writes are unsynced: a power-loss point.
                try script.append(log, 50 + k)
                try script.sync(log)
            }
            try script.close(log)
        })
        // A sidecar: a `.read` instance acknowledges what a `.write` instance appended without
        // fsyncing; each acknowledgement fsyncs the segments it covers (without the reader lock)
        // before the checkpoint moves, while the writer appends on.
        all.append(Workload(name: "a separate reader acknowledging a writer's unsynced appends", durability: .none) { _, script in
            let writer = try script.open(.write, durability: .none)
            let reader = try script.open(.read, durability: .none)
            for i in 0..<50 { try script.append(writer, i) }
            try writer.commit(sync: false)
            for _ in 0..<3 { try script.readAndAcknowledge(reader, 12) }
            for i in 50..<60 { try script.append(writer, i) }
            try writer.commit(sync: false)
            for _ in 0..<2 { try script.readAndAcknowledge(reader, 9) }
            try reader.close()
            try script.close(writer)
        })
        all.append(Workload(name: "a quota drop", maxBytes: 2 * 4096, dropsOldest: true) { open, script in
            let log = try open()
            for i in 0..<90 { try script.append(log, i) }
            try script.readAndAcknowledge(log, 5)
            try script.close(log)
        })
        all.append(Workload(name: "the rewrite after a failed fsync", durability: .batched(records: 5, interval: hour)) { open, script in
            let log = try open()
            script.fs.inject(.sync, errno: EIO, path: ".jsonl", onCall: 3)
            for i in 0..<40 { try script.append(log, i) }
            try script.sync(log)
            try script.close(log)
        })
        all.append(Workload(name: "the recovery of a torn tail", prepare: { config in
            var records: [String] = []
            let log = try BeaconLog(configuration: config)
            for i in 0..<20 {
                records.append(record(1000 + i))
                try log.append(records.last!)
            }
            try log.close()
            let names = try FileManager.default.contentsOfDirectory(atPath: config.directory).compactMap(SegmentName.parse).sorted()
            let handle = try #require(FileHandle(forWritingAtPath: config.directory + "/" + SegmentName.fileName(names.last!)))
            try handle.seekToEnd()
            try handle.write(contentsOf: Data(#"{"seq":20,"crc":1,"event":{"n":"#.utf8) + Data(count: 300))
            try handle.close()
            return records
        }) { open, script in
            let log = try open()
            for i in 0..<10 { try script.append(log, i) }
            try script.close(log)
        })
        all.append(Workload(name: "creating a new log directory", directoryExists: false) { open, script in
            let log = try open()
            for i in 0..<10 { try script.append(log, i) }
            try script.close(log)
        })
        all.append(Workload(name: "a close whose final commit fails, closed again", durability: .batched(records: 1000, interval: hour)) { open, script in
            let log = try open()
            for i in 0..<20 { try script.append(log, i) }
            script.fs.inject(.write, errno: ENOSPC, path: ".jsonl", times: 1)
            #expect(throws: BeaconLogError.self) { try log.close() }
            script.fs.clearFaults()
            // A close that returns promises every appended record is durable.
            try script.close(log)
        })
        return all
    }()

    @Test("every sampled crash state opens to a gap-free FIFO run of what was appended, keeps what was durable, re-delivers nothing acknowledged, takes new appends", arguments: workloads)
    func crashStates(workload: Workload) throws {
        try Self.expectCleanCrashStates(workload)
    }

    /// Explores `workload`'s crash states (``explore(_:)``) and expects at least 20 of them, none
    /// failing; the suites with workloads of their own call it too.
    static func expectCleanCrashStates(_ workload: Workload, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let (states, problems) = try explore(workload)
        #expect(states >= 20, "\(workload): only \(states) crash states", sourceLocation: sourceLocation)
        if exhaustive { print("\(workload): \(states) crash states, \(problems.count) failing") }
        let report = { "\(workload): \(problems.count) crash states fail, for example:\n" + problems.prefix(5).joined(separator: "\n") }
        #expect(problems.isEmpty, "\(report())", sourceLocation: sourceLocation)
    }

    /// Records `workload`, then checks its crash states; returns how many it checked and one line
    /// per failing state.
    static func explore(_ workload: Workload) throws -> (states: Int, problems: [String]) {
        try withTemporaryDirectory { root in
            try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
            let directory = root + "/log"
            let fs = FaultyFileSystem()
            fs.skipSyncs = true
            var prepared: [String] = []
            if workload.directoryExists {
                try BeaconLog(configuration: config(directory, workload, fs: SystemFileSystem())).close()
                prepared = try workload.prepare(config(directory, workload, fs: SystemFileSystem()))
            }
            fs.recording = true
            for (seq, record) in prepared.enumerated() { fs.mark(.appended(seq: UInt64(seq), record: Array(record.utf8))) }
            if !prepared.isEmpty { fs.mark(.durable(through: UInt64(prepared.count - 1))) }
            let start = try CrashStates(root: root)
            try workload.run({ try BeaconLog(configuration: config(directory, workload, fs: fs)) }, Script(fs: fs, directory: directory))
            fs.recording = false
            let model = start.after(fs.recorded)
            var problems: [String] = []
            let crashes = crashes(model)
            for crash in crashes {
                let rebuilt = temporaryDirectoryPath()
                defer { try? FileManager.default.removeItem(atPath: rebuilt) }
                try model.rebuild(crash, into: rebuilt)
                let found = check(rebuilt + "/log", crash: crash, model: model, workload: workload)
                if !found.isEmpty { problems.append("\(crash): " + found.joined(separator: "; ")) }
            }
            return (crashes.count, problems)
        }
    }

    /// The crash states to check: all of them when exhaustive, else a seeded sample.
    static func crashes(_ model: CrashStates) -> [CrashStates.Crash] {
        let count = model.operations.count
        var crashes: [CrashStates.Crash] = []
        var rng = SeededGenerator(seed: UInt64(count))
        func sample<T>(_ all: [T], _ n: Int) -> [T] {
            if exhaustive || all.count <= n { return all }
            // The last one always: the end of the workload, where every promise has been made.
            return Array(all.dropLast().shuffled(using: &rng).prefix(n - 1)) + [all.last!]
        }
        crashes += sample(Array(0...count), 24).map { .process(changes: $0) }
        for boundary in sample(model.syncBoundaries, 10) {
            let (writes, bytes) = model.unsyncedWrites(after: boundary)
            var losses: [CrashStates.PowerLoss] = [.dropped, .zeroFilled]
            losses += sample(Array(0...writes), 2).map { .prefix($0) }
            losses += sample(Array(stride(from: 512, to: max(bytes, 513), by: 512)), 2).map { .sectorCut(at: $0) }
            crashes += losses.map { .power(changes: boundary, $0) }
        }
        return crashes
    }

    /// Opens the rebuilt log and checks it against what the workload was promised before `crash`.
    static func check(_ directory: String, crash: CrashStates.Crash, model: CrashStates, workload: Workload) -> [String] {
        var problems: [String] = []
        var appended: [UInt64: [UInt8]] = [:]
        for case .appended(let seq, let record) in model.allMarkers { appended[seq] = record }
        var acknowledged: UInt64 = 0, acknowledging: UInt64 = 0
        var durable: UInt64?
        for marker in model.markers(before: crash.changes) {
            switch marker {
            case .acknowledged(let seq): acknowledged = max(acknowledged, seq)
            case .acknowledging(let seq): acknowledging = max(acknowledging, seq)
            case .durable(let seq): durable = max(durable ?? 0, seq)
            case .appended: break
            }
        }
        acknowledging = max(acknowledging, acknowledged)
        // A power loss may take back the acknowledgements written lazily since the checkpoint
        // file's last fdatasync (checkpointSyncInterval): those records are delivered again, never
        // lost. A process crash keeps them all (the page cache does).
        if case .power(let changes, _) = crash, workload.checkpointSyncInterval != nil {
            // The checkpoint files' bytes as written (the page cache), and the newest seq a
            // durable point made durable: an fdatasync of the file in place, or a whole new file
            // renamed in and its directory synced.
            var files: [String: [UInt8]] = [:]
            var durablyAcked: UInt64 = 0, renamed = false
            func newest(_ bytes: [UInt8]?) -> UInt64 {
                bytes.flatMap { Checkpoint.slots(file: $0).compactMap(\.checkpoint).max { $0.generation < $1.generation }?.position.seq } ?? 0
            }
            for operation in model.operations.prefix(changes) {
                switch operation {
                case .create(let path) where path.contains("/checkpoint"): files[path] = []
                case .write(let path, let offset, let bytes) where path.contains("/checkpoint"):
                    var file = files[path] ?? []
                    if file.count < Int(offset) + bytes.count { file += [UInt8](repeating: 0, count: Int(offset) + bytes.count - file.count) }
                    file.replaceSubrange(Int(offset)..<(Int(offset) + bytes.count), with: bytes)
                    files[path] = file
                case .rename(let from, let to) where to.hasSuffix("/checkpoint"):
                    files[to] = files.removeValue(forKey: from)
                    renamed = true
                case .sync(let path) where path.hasSuffix("/checkpoint"):
                    durablyAcked = max(durablyAcked, newest(files[path]))
                case .syncDirectory where renamed:
                    durablyAcked = max(durablyAcked, newest(files.first { $0.key.hasSuffix("/checkpoint") }?.value))
                    renamed = false
                default: break
                }
            }
            acknowledged = durablyAcked
        }
        let fs = FaultyFileSystem()
        fs.skipSyncs = true
        do {
            let log = try BeaconLog(configuration: config(directory, workload, fs: fs))
            defer { try? log.close() }
            let checkpoint = log.checkpoint.seq
            let (seqs, records, _) = try readAll(log)
            if checkpoint < acknowledged { problems.append("the checkpoint (seq \(checkpoint)) is before the acknowledged seq \(acknowledged): delivered again") }
            if !workload.dropsOldest && checkpoint > acknowledging { problems.append("the checkpoint (seq \(checkpoint)) is past every acknowledgement (\(acknowledging))") }
            if let first = seqs.first, first < acknowledged { problems.append("seq \(first) is read again after its acknowledgement returned") }
            if zip(seqs, seqs.dropFirst()).contains(where: { $0 >= $1 }) { problems.append("seqs are not increasing: \(seqs)") }
            if let first = seqs.first {
                let gapFree = seqs == Array(first...(seqs.last!))
                if !gapFree { problems.append("gaps in \(seqs)") }
                if !workload.dropsOldest && first != checkpoint { problems.append("reading starts at seq \(first), the checkpoint is \(checkpoint)") }
            }
            for (seq, record) in zip(seqs, records) where appended[seq] != Array(record.utf8) {
                problems.append("seq \(seq) reads \(record), which was not appended as that seq")
                break
            }
            if let durable, durable >= checkpoint {
                let from = workload.dropsOldest ? max(checkpoint, seqs.first ?? durable) : checkpoint
                let missing = (from...durable).filter { !Set(seqs).contains($0) }
                if !missing.isEmpty { problems.append("records made durable are gone: seqs \(missing.count == 1 ? "\(missing[0])" : "\(missing.first!)...\(missing.last!)") (read \(seqs.first.map { "\($0)...\(seqs.last!)" } ?? "nothing"))") }
            }
            let next = try log.append(#"{"after":"crash"}"#)
            try log.sync()
            let again = try readAll(log)
            if again.seqs.last != next || again.records.last != #"{"after":"crash"}"# || next < (seqs.last.map { $0 + 1 } ?? checkpoint) {
                problems.append("a new append (seq \(next)) does not read back after the old records (\(again.seqs.suffix(3)))")
            }
        } catch {
            problems.append("\(error)")
        }
        return problems
    }
}

/// The model itself: what a power loss keeps and loses, so the explorer's states are the hard ones.
@Suite("Crash-state model")
struct CrashStateModelTests {
    /// Records `body`'s changes under a fresh root and returns the model.
    func recorded(_ body: (String, FaultyFileSystem) throws -> Void) throws -> (CrashStates, String) {
        let root = temporaryDirectoryPath()
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: false)
        let start = try CrashStates(root: root)
        let fs = FaultyFileSystem()
        fs.skipSyncs = true
        fs.recording = true
        try body(root, fs)
        return (start.after(fs.recorded), root)
    }

    func contents(_ model: CrashStates, _ crash: CrashStates.Crash, _ name: String) throws -> [UInt8]? {
        let out = temporaryDirectoryPath()
        defer { try? FileManager.default.removeItem(atPath: out) }
        try model.rebuild(crash, into: out)
        return fileContents(atPath: out + "/" + name).map(Array.init)
    }

    @Test("a new directory and the files in it survive a power loss only once its parent was fsynced after the mkdir")
    func directoryEntryNeedsItsParentsFsync() throws {
        let (model, root) = try recorded { root, fs in
            _ = try fs.makeDirectory(root + "/d")
            let file = try fs.open(root + "/d/f", .createNew)
            try Array("abc".utf8).withUnsafeBytes { try fs.write(file, $0) }
            try fs.sync(file)
            try fs.syncDirectory(root + "/d")
            fs.close(file)
            try fs.syncDirectory(root)
        }
        defer { try? FileManager.default.removeItem(atPath: root) }
        #expect(model.operations.count == 6)  // mkdir, create, write, fsync, fsync d, fsync root
        #expect(try contents(model, .power(changes: 5, .dropped), "d/f") == nil, "the parent was not fsynced yet")
        #expect(try contents(model, .power(changes: 6, .dropped), "d/f") == Array("abc".utf8))
        #expect(try contents(model, .process(changes: 3), "d/f") == Array("abc".utf8), "a process crash keeps what was written")
    }

    @Test("unsynced writes: dropped, kept in part, cut at a sector, zero-filled; synced bytes always kept")
    func unsyncedWrites() throws {
        let (model, root) = try recorded { root, fs in
            let file = try fs.open(root + "/f", .createNew)
            try fs.syncDirectory(root)
            try [UInt8](repeating: 1, count: 100).withUnsafeBytes { try fs.write(file, $0) }
            try fs.sync(file)
            try [UInt8](repeating: 2, count: 600).withUnsafeBytes { try fs.write(file, $0) }
            try [UInt8](repeating: 3, count: 10).withUnsafeBytes { try fs.write(file, $0) }
            try fs.syncDirectory(root)
            fs.close(file)
        }
        defer { try? FileManager.default.removeItem(atPath: root) }
        let end = model.operations.count
        let synced = [UInt8](repeating: 1, count: 100)
        #expect(try contents(model, .power(changes: end, .dropped), "f") == synced)
        #expect(try contents(model, .power(changes: end, .prefix(1)), "f") == synced + [UInt8](repeating: 2, count: 600))
        #expect(try contents(model, .power(changes: end, .sectorCut(at: 512)), "f") == synced + [UInt8](repeating: 2, count: 412))
        #expect(try contents(model, .power(changes: end, .zeroFilled), "f") == synced + [UInt8](repeating: 0, count: 610))
        #expect(try contents(model, .process(changes: end), "f") == synced + [UInt8](repeating: 2, count: 600) + [UInt8](repeating: 3, count: 10))
    }

    @Test("a rename survives a power loss only after a directory fsync; before it the old file is there")
    func renameNeedsADirectoryFsync() throws {
        let root = temporaryDirectoryPath()
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: false)
        defer { try? FileManager.default.removeItem(atPath: root) }
        try Data("old".utf8).write(to: URL(fileURLWithPath: root + "/f"))
        let start = try CrashStates(root: root)
        let fs = FaultyFileSystem()
        fs.skipSyncs = true
        fs.recording = true
        try fs.replaceFile(root + "/f", with: Array("new".utf8))
        let model = start.after(fs.recorded)
        let renamed = try #require(model.operations.firstIndex { if case .rename = $0 { true } else { false } })
        #expect(try contents(model, .power(changes: renamed + 1, .dropped), "f") == Array("old".utf8))
        #expect(try contents(model, .power(changes: model.operations.count, .dropped), "f") == Array("new".utf8))
    }
}
