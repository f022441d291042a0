import Foundation
import Synchronization
import Testing
import BeaconTestTraits
@testable import BeaconLog
import FaultInjection

/// Reading contiguous batches across segments and acknowledging them: caps, partial batches,
/// segment deletion, the checkpoint across reopen, and refused acknowledgements.
@Suite(.blocking) struct ReadAcknowledgeTests {
    /// Append, read in batches across rolls, acknowledge part, reopen, read the rest (every policy).
    @Test(arguments: [BeaconLog.Durability.everyRecord, .batched(records: 7, interval: .milliseconds(5)), .none])
    func appendReadAcknowledgeAcrossRollsAndReopen(durability: BeaconLog.Durability) throws {
        try withTemporaryDirectory { dir in
            let config = smallConfig(dir, durability: durability)
            let records = (0..<300).map { numbered($0, pad: $0 % 50) }
            do {
                let log = try BeaconLog(configuration: config)
                for (i, r) in records.enumerated() { #expect(try log.append(r) == UInt64(i)) }
                try log.sync()
                #expect(log.stats.durableSeq == 299)
                var seen: [String] = []
                var cursor: LogPosition?
                while true {
                    let batch = try log.read(from: cursor, maxRecords: 50)
                    if batch.isEmpty { break }
                    cursor = batch.end
                    seen += batch.records.map { String(decoding: $0, as: UTF8.self) }
                    if seen.count == 100 { try log.acknowledge(through: batch.end) }
                }
                #expect(seen == records)
                #expect(log.stats.segments > 3)
                try log.close()
            }
            let log = try BeaconLog(configuration: config)
            #expect(log.checkpoint.seq == 100)
            var rest: [String] = []
            while true {
                let batch = try log.read(maxRecords: 64)
                if batch.isEmpty { break }
                rest += batch.records.map { String(decoding: $0, as: UTF8.self) }
                try log.acknowledge(through: batch.end)
            }
            #expect(rest == Array(records[100...]))
            #expect(try log.append("{}") == 300)
            #expect(log.stats.pendingRecords == 1)
            try log.close()
        }
    }

    /// Random batch sizes and byte caps, acknowledging a random prefix of each batch: every record
    /// is delivered exactly once in order, a batch stops at the first record that reaches maxBytes,
    /// wholly acknowledged segments are deleted, and the checkpoint survives reopening.
    @Test(arguments: [1, 2, 3])
    func randomBatchesAndPartialAcknowledgements(seed: UInt64) throws {
        var rng = SeededGenerator(seed: seed)
        try withTemporaryDirectory { dir in
            let config = smallConfig(dir, durability: .batched(records: 10, interval: .milliseconds(1)))
            let total = 600
            var log = try BeaconLog(configuration: config)
            var records: [String] = []
            for i in 0..<total {
                let r = numbered(i, pad: Int.random(in: 0...120, using: &rng))
                records.append(r)
                try log.append(r)
            }
            try log.sync()
            var delivered: [String] = []
            var rounds = 0
            while delivered.count < total {
                rounds += 1
                #expect(rounds < 10_000)
                if rounds > 10_000 { break }
                let maxRecords = Int.random(in: 1...80, using: &rng)
                let maxBytes = Int.random(in: 1...3000, using: &rng)
                let batch = try log.read(maxRecords: maxRecords, maxBytes: maxBytes)
                #expect(!batch.isEmpty)
                #expect(batch.count <= maxRecords)
                #expect(batch.firstSeq == UInt64(delivered.count))
                #expect(batch.seqs == Array(batch.firstSeq!...batch.lastSeq!))
                // At least one record; below maxBytes before the last one; stopped by a cap.
                #expect(batch.byteCount - batch.records.last!.count < maxBytes)
                if batch.count < maxRecords && UInt64(delivered.count + batch.count) < UInt64(total) {
                    #expect(batch.byteCount >= maxBytes)
                }
                let take = Int.random(in: 1...batch.count, using: &rng)
                delivered += batch.records.prefix(take).map { String(decoding: $0, as: UTF8.self) }
                try log.acknowledge(through: batch.end(after: take - 1))
                #expect(log.checkpoint.seq == UInt64(delivered.count))
                #expect(log.stats.acknowledgedSeq == UInt64(delivered.count - 1))
                // Segments are deleted once wholly acknowledged: every remaining one but the newest still has pending records.
                let numbers = try segmentNumbers(dir)
                for number in numbers.dropLast() {
                    let last = try rawLines(segmentPath(dir, number)).last?.seq
                    #expect(last.map { $0 >= UInt64(delivered.count) } ?? false, "segment \(number) is wholly acknowledged but still on disk")
                }
                if Int.random(in: 0..<25, using: &rng) == 0 {
                    try log.close()
                    log = try BeaconLog(configuration: config)
                    #expect(log.stats.checkpointRecovery == nil)
                    #expect(log.checkpoint.seq == UInt64(delivered.count))
                }
            }
            #expect(delivered == records)
            #expect(try log.read().isEmpty)
            try log.close()
            try expectClean(dir)
        }
    }

    /// Reading never moves the checkpoint; reading from an explicit position resumes exactly there.
    @Test func readingDoesNotMoveTheCheckpoint() throws {
        try withTemporaryDirectory { dir in
            let log = try BeaconLog(configuration: smallConfig(dir))
            for i in 0..<200 { try log.append(numbered(i, pad: 40)) }
            try log.sync()
            let first = try log.read(maxRecords: 30)
            let again = try log.read(maxRecords: 30)
            #expect(first.seqs == again.seqs)
            #expect(log.checkpoint.seq == 0)
            var cursor = first.end
            var seqs = first.seqs
            while true {
                let b = try log.read(from: cursor, maxRecords: 17)
                if b.isEmpty { break }
                #expect(b.start == cursor)
                seqs += b.seqs
                cursor = b.end
            }
            #expect(seqs == Array(0..<200))
            #expect(log.stats.pendingRecords == 200)
            try log.close()
        }
    }

    /// Acknowledging backwards leaves the checkpoint where it is; beyond the end of the log is refused.
    @Test func acknowledgeBackwardsOrBeyondTheEndIsRefused() throws {
        try withTemporaryDirectory { dir in
            let log = try BeaconLog(configuration: smallConfig(dir))
            for i in 0..<200 { try log.append(numbered(i, pad: 40)) }
            try log.sync()
            let a = try log.read(maxRecords: 50)
            let b = try log.read(from: a.end, maxRecords: 50)
            try log.acknowledge(through: b.end)
            #expect(log.checkpoint == b.end)
            try log.acknowledge(through: a.end)
            #expect(log.checkpoint == b.end)
            #expect(log.stats.acknowledgedSeq == 99)
            let end = try log.read(maxRecords: 1000).end
            #expect(end.seq == 200)
            for beyond in [
                LogPosition(segment: end.segment, offset: end.offset + 1, seq: end.seq),
                LogPosition(segment: end.segment, offset: end.offset, seq: end.seq + 1),
                LogPosition(segment: end.segment + 1, offset: 0, seq: end.seq),
                LogPosition(segment: end.segment + 5, offset: 10, seq: end.seq + 3),
            ] {
                _ = expectLogError(.invalidArgument) { try log.acknowledge(through: beyond) }
                #expect(log.checkpoint == b.end)
            }
            try log.close()
            let reopened = try BeaconLog(configuration: smallConfig(dir))
            #expect(reopened.checkpoint.seq == 100)
            try reopened.close()
        }
    }

    /// Under `.none`, acknowledging records that are written but not yet fsynced syncs them first:
    /// the segment's fsync comes before the checkpoint write, and segments are deleted only after
    /// the checkpoint is durable.
    @Test func acknowledgeMakesDataDurableFirstAndDeletesLast() throws {
        try withTemporaryDirectory { dir in
            let fs = FaultyFileSystem()
            let log = try BeaconLog(configuration: faultyConfig(dir, fs, durability: .none))
            for i in 0..<150 { try log.append(numbered(i, pad: 60)) }
            // The 10 ms background write (no fsync under .none) makes them readable: waited for by
            // the clock, up to 60 s (2,000 sleeps of 1 ms were about 2 s, short for a loaded machine).
            var batch = try log.read(maxRecords: 1000)
            let end = ContinuousClock.now + .seconds(60)
            while batch.count < 150, ContinuousClock.now < end {
                usleep(1000)
                batch = try log.read(maxRecords: 1000)
            }
            try #require(batch.count == 150)
            #expect((log.stats.durableSeq ?? 0) < 148, "\(log.stats)")
            fs.resetJournal()
            try log.acknowledge(through: batch.end(after: 148))
            #expect((log.stats.durableSeq ?? 0) >= 148)
            let journal = fs.journal
            let lastSegmentSync = journal.lastIndex { $0.operation == .sync && $0.path.hasSuffix(".jsonl") }
            let checkpointWrite = journal.firstIndex { ($0.operation == .pwrite || $0.operation == .rename) && $0.path.contains("checkpoint") }
            // Durable: fdatasync of the slot written in place, or the directory fsync after the rename.
            let checkpointSync = checkpointWrite.flatMap { w in journal.indices.first { $0 > w && (journal[$0].operation == .syncData || journal[$0].operation == .syncDirectory) } }
            let firstRemove = journal.firstIndex { $0.operation == .remove && $0.path.hasSuffix(".jsonl") }
            #expect(lastSegmentSync != nil && checkpointWrite != nil && checkpointSync != nil && firstRemove != nil, "\(journal)")
            if let lastSegmentSync, let checkpointWrite, let checkpointSync, let firstRemove {
                #expect(lastSegmentSync < checkpointWrite, "\(journal)")
                #expect(checkpointSync < firstRemove, "\(journal)")
            }
            try log.close()
        }
    }

    /// Acknowledging the last record of a segment, exactly, deletes it and a reopen resumes at the next one.
    @Test func acknowledgeExactlyAtASegmentEnd() throws {
        try withTemporaryDirectory { dir in
            let config = smallConfig(dir)
            do {
                let log = try BeaconLog(configuration: config)
                for i in 0..<300 { try log.append(numbered(i, pad: 30)) }
                try log.sync()
                let lastOfFirst = try #require(try rawLines(segmentPath(dir, 0)).last?.seq)
                let batch = try log.read(maxRecords: Int(lastOfFirst) + 1)
                #expect(batch.lastSeq == lastOfFirst)
                try log.acknowledge(through: batch.end)
                #expect(!FileManager.default.fileExists(atPath: segmentPath(dir, 0)))
                #expect(try log.read(maxRecords: 1).firstSeq == lastOfFirst + 1)
                try log.close()
            }
            let log = try BeaconLog(configuration: config)
            #expect(log.stats.checkpointRecovery == nil)
            #expect(try log.read(maxRecords: 1).seqs.first == log.checkpoint.seq)
            #expect(log.checkpoint.segment == 1)
            try log.close()
        }
    }

    /// A `.read` instance (another process appends) must refuse, like the writer does, a position
    /// beyond the data on disk: accepting it would pass over every record appended up to there.
    @Test func readerRefusesToAcknowledgeBeyondTheData() throws {
        try withTemporaryDirectory { dir in
            let (writerConfig, readerConfig) = sidecarConfigs(dir)
            let writer = try BeaconLog(configuration: writerConfig)
            let reader = try BeaconLog(configuration: readerConfig)
            for i in 0..<10 { try writer.append(numbered(i)) }
            let batch = try reader.read(maxRecords: 100)
            #expect(batch.seqs == Array(0..<10))
            for beyond in [
                LogPosition(segment: batch.end.segment, offset: batch.end.offset + 50, seq: 20),
                LogPosition(segment: batch.end.segment + 7, offset: 100, seq: 999),
            ] {
                _ = expectLogError(.invalidArgument) { try reader.acknowledge(through: beyond) }
            }
            for i in 10..<20 { try writer.append(numbered(i)) }
            let seqs = try reader.read(maxRecords: 100).seqs
            #expect(seqs == Array(0..<20))
            try reader.close()
            try writer.close()
        }
    }
}

extension ReadAcknowledgeTests {
    /// The CRC covers the event, not its seq: a record whose seq digits changed is skipped and
    /// counted, and only that one, whether the seq went down or up.
    @Test(arguments: [("\"seq\":12,", "\"seq\":11,"), ("\"seq\":12,", "\"seq\":10,"), ("\"seq\":12,", "\"seq\":92,"), ("\"seq\":12,", "\"seq\":13,")])
    func damagedSeqDigitsSkipOnlyThatRecord(from: String, to: String) throws {
        try withTemporaryDirectory { dir in
            do {
                let log = try BeaconLog(configuration: smallConfig(dir))
                for i in 0..<30 { try log.append(#"{"n":\#(i)}"#) }
                try log.close()
            }
            let path = dir + "/" + SegmentName.fileName(0)
            let text = try String(contentsOfFile: path, encoding: .utf8)
            #expect(text.contains(from))
            try text.replacingOccurrences(of: from, with: to).write(toFile: path, atomically: false, encoding: .utf8)
            let log = try BeaconLog(configuration: smallConfig(dir))
            let batch = try log.read(maxRecords: 1000)
            let ns = batch.records.map { String(decoding: $0, as: UTF8.self) }
            #expect(ns == (0..<30).filter { $0 != 12 }.map { #"{"n":\#($0)}"# })
            #expect(batch.skippedCorrupt == 1)
            #expect(log.stats.skippedCorrupt == 1)
            try log.close()
        }
    }
}

@Suite(.blocking) struct PartialAcknowledgeTests {
    /// Acknowledging through `end(after:)` of any record, across a roll, resumes exactly after it.
    @Test func acknowledgeAPrefixOfABatch() throws {
        try withTemporaryDirectory { dir in
            var config = BeaconLog.Configuration(directory: dir)
            config.segmentBytes = 4096
            let log = try BeaconLog(configuration: config)
            for i in 0..<200 { try log.append(#"{"n":\#(i),"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}"#) }
            var expected: UInt64 = 0
            for take in [1, 7, 30, 49, 13] {
                let batch = try log.read(maxRecords: 50)
                #expect(batch.firstSeq == expected)
                try log.acknowledge(through: batch.end(after: take - 1))
                expected += UInt64(take)
                #expect(log.stats.acknowledgedSeq == expected - 1)
            }
            try log.close()
            let again = try BeaconLog(configuration: config)
            #expect(try again.read(maxRecords: 1).firstSeq == expected)
            try again.close()
        }
    }
}

@Suite(.blocking) struct CorruptReasonTests {
    /// Each kind of damage is counted under its reason, and the counts survive a reopen.
    @Test func skippedRecordsAreCountedByReason() throws {
        try withTemporaryDirectory { dir in
            let config = smallConfig(dir)
            try fillLog(config, count: 20, pad: 10)
            let path = segmentPath(dir, 0)
            var bytes = [UInt8](try Data(contentsOf: URL(fileURLWithPath: path)))
            let starts = [0] + bytes.indices.filter { bytes[$0] == 0x0A }.map { $0 + 1 }.dropLast()
            // Record 3: one event byte changed (checksum). Record 7: its frame broken (malformed).
            // Record 11: zero-filled. Record 15: a seq digit changed (seqDigits).
            let event3 = bytes[starts[3]...].firstIndex(of: 0x78)!  // an 'x' of the padding
            bytes[event3] = 0x79
            bytes[starts[7] + 2] = 0x53  // {"Seq"
            for k in starts[11]..<(starts[12] - 1) { bytes[k] = 0 }
            bytes[starts[15] + 8] = bytes[starts[15] + 8] == 0x39 ? 0x38 : bytes[starts[15] + 8] + 1  // "seq":15 -> 16 or 14
            try Data(bytes).write(to: URL(fileURLWithPath: path))
            let log = try BeaconLog(configuration: config)
            let batch = try log.read(maxRecords: 100)
            #expect(batch.seqs == (0..<20).filter { ![3, 7, 11, 15].contains($0) }.map(UInt64.init))
            let expected: [CorruptionReason: UInt64] = [.checksum: 1, .malformed: 1, .zeros: 1, .seqDigits: 1]
            #expect(log.stats.skippedCorruptByReason == expected)
            #expect(log.stats.skippedCorrupt == 4)
            try log.close()
            let again = try BeaconLog(configuration: config)
            #expect(again.stats.skippedCorruptByReason == expected)
            // Reading the same damage again after the restart does not count it twice.
            _ = try again.read(maxRecords: 100)
            #expect(again.stats.skippedCorrupt == 4)
            #expect(again.stats.skippedCorruptByReason == expected)
            try again.close()
        }
    }
}

/// Deleting acknowledged segments does not hold the reader lock while the files are unlinked:
/// unlinking a full segment frees its cached pages (milliseconds), and the uploader's next read,
/// which runs meanwhile, would wait for it.
@Suite(.blocking) struct SegmentRemovalTests {
    @Test("a writer's acknowledgement unlinks passed segments with the reader lock free, after forgetting them")
    func unlinkOutsideTheReaderLock() throws {
        try withTemporaryDirectory { dir in
            let fs = FaultyFileSystem()
            let log = try BeaconLog(configuration: faultyConfig(dir, fs, durability: .none, segmentBytes: 4096))
            for i in 0..<200 { try log.append(#"{"n":\#(i),"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}"#) }
            try log.sync()
            let removals = Mutex<[(file: String, readerLockFree: Bool, stillListed: Bool)]>([])
            fs.beforeCall = { operation, path in
                guard operation == .remove, path.hasSuffix(".jsonl") else { return }
                // On the acknowledging thread: the reader lock is free unless this thread holds it.
                let free = log.readerIO.withLockIfAvailable { _ in true } ?? false
                let number = SegmentName.parse((path as NSString).lastPathComponent)
                let listed = log.state.withLock { s in s.segments.contains { $0.number == number } }
                removals.withLock { $0.append(((path as NSString).lastPathComponent, free, listed)) }
            }
            let batch = try log.read(maxRecords: 150)
            try log.acknowledge(through: batch.end)
            fs.beforeCall = nil
            let seen = removals.withLock { $0 }
            try #require(!seen.isEmpty, "the batch spans several 4 KiB segments, so some are deleted")
            for removal in seen {
                #expect(removal.readerLockFree, "\(removal.file) unlinked while the reader lock was held")
                #expect(!removal.stillListed, "\(removal.file) unlinked while reads could still look for it")
            }
            #expect(try log.read(maxRecords: 100).seqs == Array(150..<200))
            try log.close()
        }
    }
}
