import Foundation
import Testing
@testable import BeaconLog
import FaultInjection

/// `checkpointSyncInterval`: acknowledgements write the checkpoint at once (the page cache keeps it
/// through a process crash) but fdatasync it at most once per interval; segments are deleted, and
/// the log closes, only with the checkpoint durable; a failed scheduled sync is never retried on
/// the same file. What a power loss may do to the slots is in `CrashStateTests` (the workload
/// "read and acknowledge across segments", written lazily and each durable).
@Suite("Checkpoint: written at each acknowledgement, made durable once per interval", .timeLimit(.minutes(1)))
struct LazyCheckpointTests {
    static func open(_ dir: String, _ fs: FaultyFileSystem, interval: Duration?, segmentBytes: Int = 1 << 20) throws -> BeaconLog {
        var config = BeaconLog.Configuration(directory: dir)
        config.fileSystem = fs
        config.segmentBytes = segmentBytes
        config.checkpointSyncInterval = interval
        return try BeaconLog(configuration: config)
    }

    static func checkpointSyncs(_ fs: FaultyFileSystem) -> Int {
        fs.journal.filter { ($0.operation == .syncData || $0.operation == .sync) && $0.path.hasSuffix("/checkpoint") && !$0.failed }.count
    }

    /// The newest checkpoint in the file as any process would read it now (the page cache).
    static func checkpointOnFile(_ dir: String) throws -> Checkpoint? {
        let bytes = try [UInt8](Data(contentsOf: URL(fileURLWithPath: dir + "/checkpoint")))
        return Checkpoint.slots(file: bytes).compactMap(\.checkpoint).max { $0.generation < $1.generation }
    }

    /// Polls `condition` every 5 ms for at most 30 s by the clock (6,000 sleeps of 5 ms took
    /// longer on a loaded machine, past the suite's minute).
    static func eventually(_ condition: () -> Bool) {
        let end = ContinuousClock.now + .seconds(30)
        while !condition(), ContinuousClock.now < end { usleep(5000) }
    }

    @Test("20 acknowledgements within the interval: one checkpoint fdatasync at most, each one written at once")
    func oneSyncPerInterval() throws {
        try withTemporaryDirectory { dir in
            let fs = FaultyFileSystem()
            let log = try Self.open(dir, fs, interval: .seconds(60))
            for i in 0..<100 { try log.append(#"{"n":\#(i)}"#) }
            try log.sync()
            for k in 1...20 {
                try log.acknowledge(through: try log.read(maxRecords: 5).end)
                #expect(try Self.checkpointOnFile(dir)?.position.seq == UInt64(5 * k), "acknowledgement \(k) is in the file at once")
            }
            // The first makes the file (tmp, fsync, rename); the rest wait for the interval.
            #expect(Self.checkpointSyncs(fs) == 0, "\(fs.calls(.syncData, path: "checkpoint"))")
            try log.close()
            #expect(Self.checkpointSyncs(fs) == 1, "close makes the last one durable")
        }
    }

    @Test("with no interval every acknowledgement is durable before it returns")
    func everyAcknowledgementDurable() throws {
        try withTemporaryDirectory { dir in
            let fs = FaultyFileSystem()
            let log = try Self.open(dir, fs, interval: nil)
            for i in 0..<100 { try log.append(#"{"n":\#(i)}"#) }
            try log.sync()
            for k in 1...20 {
                try log.acknowledge(through: try log.read(maxRecords: 5).end)
                #expect(Self.checkpointSyncs(fs) == k - 1, "the first makes the file, each later one its fdatasync")
            }
            try log.close()
        }
    }

    @Test("a lone acknowledgement becomes durable once the interval passes, with no further call")
    func scheduledSync() throws {
        try withTemporaryDirectory { dir in
            let fs = FaultyFileSystem()
            let log = try Self.open(dir, fs, interval: .milliseconds(100))
            for i in 0..<20 { try log.append(#"{"n":\#(i)}"#) }
            try log.sync()
            try log.acknowledge(through: try log.read(maxRecords: 5).end)
            try log.acknowledge(through: try log.read(maxRecords: 5).end)
            #expect(Self.checkpointSyncs(fs) == 0)
            Self.eventually { Self.checkpointSyncs(fs) == 1 }
            #expect(Self.checkpointSyncs(fs) == 1, "the scheduled fdatasync ran")
            #expect(try Self.checkpointOnFile(dir)?.position.seq == 10)
            try log.close()
            #expect(Self.checkpointSyncs(fs) == 1, "close has nothing left to sync")
        }
    }

    @Test("a segment the checkpoint passed is deleted only after the checkpoint is durable")
    func deletionAfterSync() throws {
        try withTemporaryDirectory { dir in
            let fs = FaultyFileSystem()
            let log = try Self.open(dir, fs, interval: .seconds(60), segmentBytes: 4096)
            for i in 0..<400 { try log.append(#"{"n":\#(i),"pad":"\#(String(repeating: "x", count: 40))"}"#) }
            try log.sync()
            #expect(log.stats.segments > 2)
            try log.acknowledge(through: try log.read(maxRecords: 10).end)  // makes the file
            fs.resetJournal()
            try log.acknowledge(through: try log.read(maxRecords: 200).end)
            let journal = fs.journal
            let removed = journal.firstIndex { $0.operation == .remove && $0.path.hasSuffix(".jsonl") }
            let synced = journal.firstIndex { $0.operation == .syncData && $0.path.hasSuffix("/checkpoint") }
            #expect(removed != nil, "a segment was deleted: \(journal)")
            if let removed {
                #expect(synced.map { $0 < removed } == true, "the checkpoint's fdatasync comes before the first unlink: \(journal)")
            }
            try log.close()
        }
    }

    @Test("a scheduled fdatasync that fails is not retried on the file: the next checkpoint replaces it whole, and nothing is lost", arguments: [EIO, ENOSPC])
    func failedScheduledSync(errno code: Int32) throws {
        try withTemporaryDirectory { dir in
            let fs = FaultyFileSystem()
            let log = try Self.open(dir, fs, interval: .milliseconds(50))
            for i in 0..<30 { try log.append(#"{"n":\#(i)}"#) }
            try log.sync()
            try log.acknowledge(through: try log.read(maxRecords: 5).end)  // makes the file
            fs.inject(.syncData, errno: code, path: "checkpoint", times: 1)
            try log.acknowledge(through: try log.read(maxRecords: 5).end)
            Self.eventually { fs.calls(.syncData, path: "checkpoint").contains { $0.failed } }
            #expect(fs.calls(.syncData, path: "checkpoint").contains { $0.failed }, "the scheduled sync ran and failed")
            usleep(20_000)
            let renamesBefore = fs.calls(.rename, path: "checkpoint").count
            try log.acknowledge(through: try log.read(maxRecords: 5).end)
            #expect(fs.calls(.rename, path: "checkpoint").count == renamesBefore + 1, "replaced whole (tmp, fsync, rename)")
            #expect(try Self.checkpointOnFile(dir)?.position.seq == 15)
            try log.close()
            let again = try Self.open(dir, FaultyFileSystem(), interval: .seconds(1))
            #expect(again.checkpoint.seq == 15)
            #expect(try again.read(maxRecords: 100).count == 15, "every record after the checkpoint is still there")
            try again.close()
        }
    }

    @Test("an earlier process's lazily written checkpoint is made durable before the other slot is written")
    func reopenSyncsFirst() throws {
        try withTemporaryDirectory { dir in
            let first = try Self.open(dir, FaultyFileSystem(), interval: .seconds(60))
            for i in 0..<30 { try first.append(#"{"n":\#(i)}"#) }
            try first.sync()
            try first.acknowledge(through: try first.read(maxRecords: 5).end)
            try first.acknowledge(through: try first.read(maxRecords: 5).end)
            _ = first.abandon()  // as if killed: the second checkpoint is in the page cache only
            let fs = FaultyFileSystem()
            let second = try Self.open(dir, fs, interval: .seconds(60))
            #expect(second.checkpoint.seq == 10, "the page cache kept the lazily written one")
            try second.acknowledge(through: try second.read(maxRecords: 5).end)
            let journal = fs.journal.filter { $0.path.hasSuffix("/checkpoint") }
            let sync = journal.firstIndex { $0.operation == .syncData }
            let write = journal.firstIndex { $0.operation == .pwrite || $0.operation == .write }
            #expect(sync != nil && write != nil && sync! < write!, "fdatasync before the first slot write: \(journal)")
            try second.close()
        }
    }
}
