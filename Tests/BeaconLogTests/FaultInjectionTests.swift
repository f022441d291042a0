import Foundation
import Glibc
import Testing
@testable import BeaconLog
import FaultInjection

/// Faults injected through the file-system seam (`FaultyFileSystem`): disk full with short writes,
/// `EIO` from fsync, failing renames, removes and directory fsyncs. After each: no corrupt record on
/// disk, FIFO, contiguous seqs, nothing the log accepted is lost, fsync failures are never retried
/// on the same file, and the log either recovers or reports `.failed` on every later call.
@Suite struct FaultInjectionTests {
    /// What a scripted run saw.
    struct Run {
        /// Content of every record the log accepted (returned a seq, or kept it after a write error).
        var accepted: [UInt64: String] = [:]
        /// The highest seq covered by a successful acknowledge.
        var acknowledgedSeq: UInt64 = 0
        /// Seqs known durable: everyRecord appends that returned, and everything before a successful sync().
        var durableThrough: UInt64 = 0
        /// Records whose append threw without `keptSeqs`: not accepted, but their bytes may have
        /// reached the file before the failure (an fsync error leaves that open), so they may appear.
        var uncertain: Set<String> = []
        /// Records whose append was refused (an error other than `.failed`, without `keptSeqs`): must never appear.
        var refused: Set<String> = []
        var errors: [BeaconLogError] = []
        var failed: BeaconLogError?
    }

    /// Appends `count` records (acknowledging every `ackEvery`), recording outcomes. Once the log
    /// reports `.failed`, checks that every later call reports it too.
    func drive(_ log: BeaconLog, count: Int, start: Int = 0, ackEvery: Int = 0, syncEvery: Int = 0, run: inout Run, sourceLocation: SourceLocation = #_sourceLocation) {
        for i in start..<(start + count) {
            let record = numbered(i, pad: 30)
            do {
                let seq = try log.append(record)
                run.accepted[seq] = record
                if log.configuration.durability == .everyRecord { run.durableThrough = max(run.durableThrough, seq + 1) }
            } catch let error as BeaconLogError {
                run.errors.append(error)
                if let kept = error.keptSeqs {
                    #expect(kept.count == 1, sourceLocation: sourceLocation)
                    run.accepted[kept.lowerBound] = record
                } else if error.code == .failed {
                    run.uncertain.insert(record)
                } else {
                    run.refused.insert(record)
                }
                if error.code == .failed { run.failed = error }
            } catch {
                Issue.record("not a BeaconLogError: \(error)", sourceLocation: sourceLocation)
            }
            if run.failed != nil { break }
            if syncEvery > 0 && i % syncEvery == syncEvery - 1 {
                do {
                    try log.sync()
                    run.durableThrough = log.stats.nextSeq
                } catch let error as BeaconLogError {
                    run.errors.append(error)
                    if error.code == .failed { run.failed = error; break }
                } catch {
                    Issue.record("sync threw an error that is not a BeaconLogError: \(error)", sourceLocation: sourceLocation)
                }
            }
            if ackEvery > 0 && i % ackEvery == ackEvery - 1 {
                do {
                    let batch = try log.read(maxRecords: ackEvery / 2 + 1)
                    try log.acknowledge(through: batch.end)
                    run.acknowledgedSeq = max(run.acknowledgedSeq, batch.end.seq)
                } catch let error as BeaconLogError {
                    run.errors.append(error)
                    if error.code == .failed { run.failed = error; break }
                } catch {
                    Issue.record("read or acknowledge threw an error that is not a BeaconLogError: \(error)", sourceLocation: sourceLocation)
                }
            }
        }
        if let failure = run.failed {
            for call in [{ _ = try log.append("{}") }, { try log.sync() }, { _ = try log.read() }, { try log.acknowledge(through: LogPosition(segment: 0, offset: 0, seq: 1)) }] as [() throws -> Void] {
                let e = expectLogError(.failed, sourceLocation: sourceLocation, call)
                #expect(e?.message == failure.message, sourceLocation: sourceLocation)
            }
        }
    }

    /// After the run: no sync on a file after a failed sync on it; reopen with the real file
    /// system; the records from the checkpoint on are contiguous, in order, with the accepted
    /// content, none missing that the log accepted (or, after `.failed`, that was durable), and
    /// the log accepts new records with the next seq; verify finds no damaged record.
    func checkAfterReopen(_ dir: String, _ fs: FaultyFileSystem, _ run: Run, config: BeaconLog.Configuration, reopenWith reopenFS: any FileSystem = SystemFileSystem(), sourceLocation: SourceLocation = #_sourceLocation) throws {
        var failedSyncs: Set<String> = []
        for call in fs.journal where call.operation == .sync || call.operation == .syncData {
            #expect(!failedSyncs.contains(call.path), "fsync retried on \(call.path) after it failed", sourceLocation: sourceLocation)
            if call.failed && call.path.hasSuffix(".jsonl") { failedSyncs.insert(call.path) }
        }
        var clean = config
        clean.fileSystem = reopenFS
        let log = try BeaconLog(configuration: clean)
        let read = try readAll(log)
        #expect(read.skipped == 0, sourceLocation: sourceLocation)
        #expect(log.checkpoint.seq >= run.acknowledgedSeq, "an acknowledgement that returned was lost", sourceLocation: sourceLocation)
        let first = log.checkpoint.seq
        #expect(read.seqs == Array(first..<(first + UInt64(read.seqs.count))), "not contiguous from the checkpoint: \(read.seqs.prefix(5))…", sourceLocation: sourceLocation)
        for record in read.records {
            #expect(!run.refused.contains(record), "\(record) was refused (no keptSeqs) but is in the log", sourceLocation: sourceLocation)
        }
        for (seq, record) in zip(read.seqs, read.records) {
            #expect(run.accepted[seq] == record || (run.accepted[seq] == nil && run.uncertain.contains(record)), "seq \(seq) holds \(record), accepted \(run.accepted[seq] ?? "nothing")", sourceLocation: sourceLocation)
        }
        let end = first + UInt64(read.seqs.count)
        let mustHave = run.failed == nil ? (run.accepted.keys.max().map { $0 + 1 } ?? 0) : run.durableThrough
        #expect(end >= mustHave, "records \(end)..<\(mustHave) were accepted but are gone", sourceLocation: sourceLocation)
        #expect(try log.append("{}") == end, sourceLocation: sourceLocation)
        try log.close()
        let report = try BeaconLog.verify(directory: dir)
        let damaged = report.problems.filter { !$0.reason.contains("repeats or goes back") }
        #expect(damaged.isEmpty, "verify: \(damaged.map(\.description))", sourceLocation: sourceLocation)
    }

    /// Disk full after every possible number of bytes (a short write, then `ENOSPC`): the error is
    /// `.diskFull` and says the records are kept, no partial record stays on disk, and once space
    /// frees every accepted record is written, in order.
    @Test(arguments: Array(stride(from: 0, through: 140, by: 1)))
    func diskFullAfterEveryByteCount(budget: Int) throws {
        try withTemporaryDirectory { dir in
            let fs = FaultyFileSystem()
            fs.skipSyncs = true
            let config = faultyConfig(dir, fs, durability: .everyRecord)
            let log = try BeaconLog(configuration: config)
            var run = Run()
            drive(log, count: 3, run: &run)
            fs.spaceLeft = budget
            drive(log, count: 5, start: 3, run: &run)
            #expect(run.failed == nil)
            let full = run.errors.filter { $0.code == .diskFull }
            #expect(!full.isEmpty, "no disk-full error with \(budget) bytes left")
            #expect(full.allSatisfy { $0.keptSeqs != nil && $0.errno == ENOSPC })
            // The error names the file and says what to do.
            #expect(full.allSatisfy { $0.path?.hasSuffix(".jsonl") == true && $0.message.contains("free space") && $0.message.contains("do not append it again") }, "\(full.first.map(\.description) ?? "")")
            // Nothing partial on disk while the disk is full.
            let lines = try rawLines(segmentPath(dir, 0))
            #expect(try fileSize(segmentPath(dir, 0)) == UInt64(lines.last?.range.upperBound ?? 0))
            #expect(lines.allSatisfy { $0.seq != nil })
            try expectClean(dir)
            // Space frees: the next append writes everything kept.
            fs.spaceLeft = nil
            drive(log, count: 2, start: 8, run: &run)
            #expect(run.errors.count == full.count)
            #expect(try readAll(log).seqs == Array(0..<10))
            try log.close()
            try checkAfterReopen(dir, fs, run, config: config, reopenWith: fastConfig(dir).fileSystem)
        }
    }

    /// Disk full under group commit with a background flush and acknowledgements (the checkpoint's
    /// writes fail too); appends resume once space frees.
    @Test(arguments: [BeaconLog.Durability.batched(records: 8, interval: .milliseconds(1)), .none])
    func diskFullUnderGroupCommit(durability: BeaconLog.Durability) throws {
        try withTemporaryDirectory { dir in
            let fs = FaultyFileSystem()
            let config = faultyConfig(dir, fs, durability: durability)
            let log = try BeaconLog(configuration: config)
            var run = Run()
            drive(log, count: 40, ackEvery: 10, syncEvery: 10, run: &run)
            fs.spaceLeft = 500
            drive(log, count: 100, start: 40, ackEvery: 10, syncEvery: 10, run: &run)
            #expect(run.errors.contains { $0.code == .diskFull })
            #expect(run.failed == nil)
            fs.spaceLeft = nil
            drive(log, count: 20, start: 140, ackEvery: 10, syncEvery: 5, run: &run)
            try log.sync()
            try log.close()
            try checkAfterReopen(dir, fs, run, config: config)
        }
    }

    /// `EIO` from the k-th fsync of a segment, under each policy: the unsynced records are
    /// rewritten into a fresh segment (never synced again on the failed file) or the log fails and
    /// says so on every call; nothing accepted is lost.
    @Test(arguments: [BeaconLog.Durability.everyRecord, .batched(records: 8, interval: .milliseconds(1)), .none], Array(1...12))
    func fsyncFailsOnce(durability: BeaconLog.Durability, k: Int) throws {
        try withTemporaryDirectory { dir in
            let fs = FaultyFileSystem()
            fs.skipSyncs = true  // the injected failure still fires; the others do not wait on the disk
            let config = faultyConfig(dir, fs, durability: durability)
            fs.inject(.sync, errno: EIO, path: ".jsonl", onCall: k)
            let log = try BeaconLog(configuration: config)
            var run = Run()
            drive(log, count: 200, ackEvery: 25, syncEvery: 10, run: &run)
            #expect(fs.calls(.sync, path: ".jsonl").contains { $0.failed }, "the fault never fired")
            if run.failed == nil {
                try log.sync()
                #expect(log.stats.durableSeq == log.stats.nextSeq - 1)
                // The failed file is not the one holding the records now: they were rewritten.
                let failedPath = fs.calls(.sync, path: ".jsonl").first { $0.failed }!.path
                let later = fs.calls(.sync, path: ".jsonl").drop { $0.path != failedPath || !$0.failed }.dropFirst()
                #expect(later.contains { !$0.failed && $0.path != failedPath }, "no successful fsync of a fresh segment after the failure")
            }
            try? log.close()
            try checkAfterReopen(dir, fs, run, config: config, reopenWith: fastConfig(dir).fileSystem)
        }
    }

    /// Every fsync fails: the rewrite fails too, so the log must be `.failed`, reported by every
    /// later call, with everything durable before the fault intact.
    @Test(arguments: [BeaconLog.Durability.everyRecord, .batched(records: 8, interval: .milliseconds(1)), .none])
    func fsyncKeepsFailing(durability: BeaconLog.Durability) throws {
        try withTemporaryDirectory { dir in
            let fs = FaultyFileSystem()
            let config = faultyConfig(dir, fs, durability: durability)
            let log = try BeaconLog(configuration: config)
            var run = Run()
            drive(log, count: 30, syncEvery: 10, run: &run)
            fs.inject(.sync, errno: EIO, path: ".jsonl")
            drive(log, count: 200, start: 30, ackEvery: 25, syncEvery: 10, run: &run)
            #expect(run.failed != nil, "the log kept going although no fsync succeeds")
            #expect(run.failed?.code == .failed && run.failed?.message.contains("reopen") == true, "\(run.failed?.description ?? "")")
            #expect(run.failed?.errno == EIO || run.failed?.message.contains("fsync") == true)
            fs.clearFaults()
            try? log.close()
            try checkAfterReopen(dir, fs, run, config: config)
        }
    }

    /// Failures of the directory fsync, remove, rename, checkpoint fdatasync and open, on the k-th
    /// call: each is a visible error; the log recovers once the fault is gone, or fails loudly.
    @Test(arguments: [
        (FaultyFileSystem.Operation.syncDirectory, nil as String?),
        (.remove, ".jsonl"), (.rename, "checkpoint"), (.syncData, "checkpoint"), (.pwrite, "checkpoint"), (.open, ".jsonl"),
    ], [1, 2, 3, 4, 6])
    func otherOperationsFail(fault: (FaultyFileSystem.Operation, String?), k: Int) throws {
        let (operation, path) = fault
        try withTemporaryDirectory { dir in
            let fs = FaultyFileSystem()
            fs.skipSyncs = true
            let config = faultyConfig(dir, fs, durability: .batched(records: 8, interval: .milliseconds(1)))
            let log = try BeaconLog(configuration: config)
            fs.inject(operation, errno: EIO, path: path, onCall: k)
            var run = Run()
            drive(log, count: 300, ackEvery: 20, syncEvery: 10, run: &run)
            let fired = fs.journal.contains { $0.operation == operation && $0.failed }
            if fired {
                // A call saw it, or a background flush did (and retried): then stats says so.
                #expect(!run.errors.isEmpty || run.failed != nil || log.stats.lastError != nil, "\(operation) failed but nothing reported it")
            }
            if run.failed == nil {
                drive(log, count: 20, start: 300, ackEvery: 10, syncEvery: 5, run: &run)
                if run.failed == nil { try log.sync() }
            }
            try? log.close()
            try checkAfterReopen(dir, fs, run, config: config, reopenWith: fastConfig(dir).fileSystem)
        }
    }

    /// After an fsync failure the unsynced records are rewritten into a fresh segment, so the old
    /// segment may keep a copy: the reader passes over the copy, and verify should too.
    @Test func verifyAcceptsTheCopyLeftByARewrite() throws {
        try withTemporaryDirectory { dir in
            let fs = FaultyFileSystem()
            fs.inject(.sync, errno: EIO, path: ".jsonl", onCall: 3)
            let log = try BeaconLog(configuration: faultyConfig(dir, fs))
            for i in 0..<10 { try log.append(numbered(i)) }
            try log.close()
            #expect(try segmentNumbers(dir) == [0, 1])
            let again = try BeaconLog(configuration: smallConfig(dir))
            #expect(try readAll(again).seqs == Array(0..<10))
            try again.close()
            let report = try BeaconLog.verify(directory: dir)
            #expect(report.isClean, "\(report.problems)")
        }
    }

    /// Under `.none` the first fsync of a segment is at its roll: failing it makes the roll
    /// rewrite the segment's records into the next segment, and appending goes on there.
    @Test(arguments: [1, 2, 3])
    func fsyncFailsAtARollUnderNone(rollNumber: Int) throws {
        try withTemporaryDirectory { dir in
            let fs = FaultyFileSystem()
            let config = faultyConfig(dir, fs, durability: .none)
            fs.inject(.sync, errno: EIO, path: SegmentName.fileName(UInt64(rollNumber - 1)), onCall: 1)
            let log = try BeaconLog(configuration: config)
            var run = Run()
            drive(log, count: 400, run: &run)
            #expect(run.failed == nil)
            try log.sync()
            #expect(fs.calls(.sync, path: SegmentName.fileName(UInt64(rollNumber - 1))).first?.failed == true)
            #expect(log.stats.durableSeq == 399)
            try log.close()
            try checkAfterReopen(dir, fs, run, config: config)
        }
    }

    /// A short write whose partial bytes cannot be cut off (ftruncate fails too): the log must not
    /// append after them; it fails, and the next open repairs the tail.
    @Test func shortWriteThatCannotBeCutOffFailsTheLog() throws {
        try withTemporaryDirectory { dir in
            let fs = FaultyFileSystem()
            let config = faultyConfig(dir, fs, durability: .everyRecord)
            let log = try BeaconLog(configuration: config)
            var run = Run()
            drive(log, count: 5, run: &run)
            fs.inject(.write, errno: EIO, path: ".jsonl", onCall: 1, afterBytes: 17)
            fs.inject(.truncate, errno: EIO, path: ".jsonl")
            drive(log, count: 5, start: 5, run: &run)
            #expect(run.failed != nil, "the log went on after leaving a partial record behind")
            fs.clearFaults()
            try? log.close()
            // The partial record is on disk now; reopening cuts it off.
            #expect(try fileSize(segmentPath(dir, 0)) > UInt64(try rawLines(segmentPath(dir, 0)).last!.range.upperBound))
            try checkAfterReopen(dir, fs, run, config: config)
        }
    }
}
