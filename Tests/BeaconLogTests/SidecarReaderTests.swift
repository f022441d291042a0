import Foundation
import Glibc
import Synchronization
import Testing
import BeaconTestTraits
@testable import BeaconLog
import FaultInjection

/// A `.read` instance beside a writer that is another instance (a service and its sidecar, as
/// `beacon send` runs): what reading and acknowledging cost in file-system calls, and that the
/// reader stays exact while the writer appends, rolls segments and drops old ones under its quota.
@Suite(.blocking) struct SidecarReaderTests {
    /// A `.read` configuration on `dir` whose calls `fs` counts (its fsyncs skip the disk).
    func readerConfig(_ dir: String, _ fs: FaultyFileSystem) -> BeaconLog.Configuration {
        fs.skipSyncs = true
        var config = faultyConfig(dir, fs, durability: .none)
        config.access = .read
        return config
    }

    /// A `.write` configuration on `dir` with 4 KiB segments and at most `maxBytes` on disk.
    func writerConfig(_ dir: String, maxBytes: Int64) -> BeaconLog.Configuration {
        var config = fastConfig(dir, durability: .none, maxBytes: maxBytes)
        config.access = .write
        return config
    }

    /// The segment number in a segment file's path, nil for other files.
    func segmentNumber(_ path: String) -> UInt64? {
        SegmentName.parse((path as NSString).lastPathComponent)
    }

    /// Reading and acknowledging a backlog batch by batch costs calls per segment, not per batch
    /// or per record: the directory is listed once per segment left behind (to delete it) and at
    /// the end of the log, each segment is opened once and its size looked up a few times, and
    /// each acknowledgement fsyncs the segment read through the descriptor already open.
    @Test func readingAndAcknowledgingCostsCallsPerSegment() throws {
        try withTemporaryDirectory { dir in
            let count = 2000
            try fillLog(fastConfig(dir, durability: .none), count: count, pad: 30)
            let segments = try segmentNumbers(dir).count
            #expect(segments >= 20)
            let fs = FaultyFileSystem()
            let reader = try BeaconLog(configuration: readerConfig(dir, fs))
            fs.resetJournal()
            var seqs: [UInt64] = []
            var batches = 0
            while true {
                let batch = try reader.read(maxRecords: 10)
                if batch.isEmpty { break }
                seqs += batch.seqs
                try reader.acknowledge(through: batch.end)
                batches += 1
            }
            #expect(seqs == Array(0..<UInt64(count)))
            #expect(try segmentNumbers(dir).count == 1)
            let calls = Dictionary(grouping: fs.journal, by: \.operation).mapValues(\.count)
            let summary = "\(batches) batches over \(segments) segments: \(calls.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.key) \($0.value)" })"
            #expect(fs.calls(.list).count <= segments + 1, "\(summary)")
            // Every segment, and the checkpoint file (created whole through a temporary file).
            #expect(fs.calls(.open).count <= segments + 2, "\(summary)")
            #expect(fs.calls(.close).count <= segments + 2, "\(summary)")
            #expect(fs.calls(.size).count + fs.calls(.fileSize).count <= 4 * segments + 2, "\(summary)")
            #expect(fs.calls(.sync).count <= batches + segments, "\(summary)")
            try reader.close()
        }
    }

    /// An acknowledgement's fsync of the segments read does not hold up reading: while it is held
    /// (the file system blocks in it), the next batches are read, into `moves` more segments; past
    /// `keptForSyncLimit` of them the reader lets go of the descriptor being fsynced, which is then
    /// closed only after its fsync; the acknowledgement succeeds and reading goes on in order.
    /// (Under the reader lock, the fsync made the read wait for the device flush, and on a loaded
    /// machine for the acknowledging thread to be scheduled again: `beacon send` under load.)
    @Test(arguments: [0, 1, BeaconLog.keptForSyncLimit + 2])
    func readingGoesOnWhileAnAcknowledgementFsyncs(moves: Int) throws {
        try withTemporaryDirectory { dir in
            let count = 2000
            try fillLog(fastConfig(dir, durability: .none), count: count, pad: 30)
            let fs = FaultyFileSystem()
            let reader = try BeaconLog(configuration: readerConfig(dir, fs))
            let first = try reader.read(maxRecords: 10)
            let holding = DispatchSemaphore(value: 0), release = DispatchSemaphore(value: 0)
            let armed = Atomic<Bool>(true)
            fs.beforeCall = { operation, path in
                guard operation == .sync, path.hasSuffix(".jsonl"), armed.exchange(false, ordering: .acquiringAndReleasing) else { return }
                holding.signal()
                _ = release.wait(timeout: .now() + 60)
            }
            fs.resetJournal()
            let acknowledged = Mutex<Result<Void, any Error>?>(nil)
            let acknowledgeDone = DispatchSemaphore(value: 0)
            Thread {
                let result = Result { try reader.acknowledge(through: first.end) }
                acknowledged.withLock { $0 = result }
                acknowledgeDone.signal()
            }.start()
            let held = holding.wait(timeout: .now() + 60) == .success
            #expect(held, "the acknowledgement fsynced no segment")
            // Read on while the fsync is held, until a batch ends `moves` segments further.
            let read = Mutex<(seqs: [UInt64], end: LogPosition, error: (any Error)?)>(([], first.end, nil))
            let readDone = DispatchSemaphore(value: 0)
            Thread {
                do {
                    while true {
                        let batch = try reader.read(from: read.withLock { $0.end }, maxRecords: 10)
                        if batch.isEmpty { break }
                        read.withLock { $0 = ($0.seqs + batch.seqs, batch.end, nil) }
                        if batch.end.segment >= first.end.segment + UInt64(moves) { break }
                    }
                } catch {
                    read.withLock { $0.error = error }
                }
                readDone.signal()
            }.start()
            let readWhileHeld = readDone.wait(timeout: .now() + (held ? 60 : 0)) == .success
            release.signal()
            #expect(readWhileHeld, "a read waited for the acknowledgement's fsync")
            #expect(acknowledgeDone.wait(timeout: .now() + 60) == .success)
            if !readWhileHeld { _ = readDone.wait(timeout: .now() + 60) }
            try acknowledged.withLock { try $0?.get() }
            try read.withLock { if let error = $0.error { throw error } }
            #expect(read.withLock { !$0.seqs.isEmpty }, "nothing read while the fsync was held")
            #expect(reader.checkpoint.seq == first.end.seq)
            // The descriptor fsynced was closed after its fsync, never before.
            let journal = fs.journal
            if let synced = journal.firstIndex(where: { $0.operation == .sync && $0.path.hasSuffix(".jsonl") }) {
                let path = journal[synced].path
                #expect(!journal[..<synced].contains { $0.operation == .close && $0.path == path }, "\(journal)")
            } else {
                Issue.record("no segment fsynced: \(journal)")
            }
            // Reading and acknowledging the rest: every record once, in order.
            var (seqs, end) = read.withLock { ($0.seqs, $0.end) }
            while true {
                let batch = try reader.read(from: end, maxRecords: 50)
                if batch.isEmpty { break }
                seqs += batch.seqs
                end = batch.end
                try reader.acknowledge(through: end)
            }
            #expect(first.seqs + seqs == Array(0..<UInt64(count)))
            try reader.close()
        }
    }

    /// A reader that catches up with a writer appending in the same directory (on another thread,
    /// rolling 4 KiB segments) reads every record once, in order, and acknowledging them deletes
    /// every segment but the newest.
    @Test func aReaderFollowingAWriterReadsEverythingOnce() throws {
        try withTemporaryDirectory { dir in
            let count = 3000
            let writer = try BeaconLog(configuration: writerConfig(dir, maxBytes: 1 << 30))
            let fs = FaultyFileSystem()
            let reader = try BeaconLog(configuration: readerConfig(dir, fs))
            let appended = Atomic<Bool>(false)
            let appending = Thread {
                for i in 0..<count {
                    _ = try? writer.append(numbered(i, pad: i % 50))
                    if i % 97 == 0 { try? writer.commit(sync: false) }
                }
                try? writer.commit(sync: false)
                appended.store(true, ordering: .releasing)
            }
            appending.start()
            var seqs: [UInt64] = []
            var records: [String] = []
            let deadline = ContinuousClock.now + .seconds(60)
            while seqs.count < count && ContinuousClock.now < deadline {
                let done = appended.load(ordering: .acquiring)
                let batch = try reader.read(maxRecords: 37)
                seqs += batch.seqs
                records += batch.records.map { String(decoding: $0, as: UTF8.self) }
                if !batch.isEmpty { try reader.acknowledge(through: batch.end) }
                if batch.isEmpty && done { break }
            }
            #expect(seqs == Array(0..<UInt64(count)))
            #expect(records == (0..<count).map { numbered($0, pad: $0 % 50) })
            #expect(try segmentNumbers(dir).count == 1)
            #expect(reader.checkpoint.seq == UInt64(count))
            try reader.close()
            try writer.close()
            try expectClean(dir)
        }
    }

    /// A writer dropping the oldest segments under a small quota while the reader reads ahead of
    /// its acknowledgements (up to three batches in flight, as the uploader does): the reader
    /// still reads in order, each record once, passing over only records the writer dropped;
    /// every acknowledgement first fsyncs each segment still on disk that holds records it
    /// covers (the writer never fsyncs: durability `.none`); and acknowledging everything leaves
    /// only the newest segment.
    @Test(arguments: [1, 2, 3, 4, 5, 6])
    func aReaderAheadOfAWriterDroppingSegments(seed: UInt64) throws {
        try withTemporaryDirectory { dir in
            var random = SeededGenerator(seed: seed)
            let writer = try BeaconLog(configuration: writerConfig(dir, maxBytes: 16 << 10))
            let fs = FaultyFileSystem()
            let reader = try BeaconLog(configuration: readerConfig(dir, fs))
            var appended = 0
            var seqs: [UInt64] = []
            var inFlight: [LogBatch] = []
            /// Acknowledges the oldest batch in flight, checking the fsyncs that made it durable.
            func acknowledgeOldest() throws {
                let batch = inFlight.removeFirst()
                let onDisk = Set(try segmentNumbers(dir))
                let holding = Set(batch.recordEnds.map(\.segment))
                fs.resetJournal()
                try reader.acknowledge(through: batch.end)
                let synced = Set(fs.calls(.sync).compactMap { segmentNumber($0.path) })
                #expect(holding.intersection(onDisk).isSubset(of: synced), "seed \(seed): acknowledging \(batch.end) fsynced \(synced.sorted()), not all of \(holding.intersection(onDisk).sorted())")
            }
            for step in 0..<600 {
                if step < 500 {
                    let burst = Int.random(in: 0...40, using: &random)
                    for _ in 0..<burst {
                        _ = try writer.append(numbered(appended, pad: appended % 60))
                        appended += 1
                    }
                    try writer.commit(sync: false)
                }
                if inFlight.count < 3 && Bool.random(using: &random) {
                    let batch = try reader.read(from: inFlight.last?.end, maxRecords: Int.random(in: 1...60, using: &random))
                    if !batch.isEmpty {
                        seqs += batch.seqs
                        for (seq, record) in zip(batch.seqs, batch.records) {
                            #expect(String(decoding: record, as: UTF8.self) == numbered(Int(seq), pad: Int(seq) % 60))
                        }
                        inFlight.append(batch)
                    }
                } else if !inFlight.isEmpty {
                    try acknowledgeOldest()
                }
            }
            while !inFlight.isEmpty { try acknowledgeOldest() }
            while true {
                let batch = try reader.read(maxRecords: 100)
                if batch.isEmpty { break }
                seqs += batch.seqs
                inFlight.append(batch)
                try acknowledgeOldest()
            }
            #expect(zip(seqs, seqs.dropFirst()).allSatisfy { $0 < $1 }, "seed \(seed): records out of order or repeated")
            #expect(seqs.last == UInt64(appended - 1))
            let dropped = try #require(writer.stats.dropped[.quotaDeleted])
            #expect(dropped > 0, "seed \(seed): the quota never dropped a segment")
            #expect(UInt64(appended - seqs.count) <= dropped, "seed \(seed): \(appended - seqs.count) records never read, \(dropped) dropped")
            #expect(try segmentNumbers(dir).count == 1)
            try reader.close()
            try writer.close()
        }
    }

    /// The segments the reader listed may be gone when it gets to them (the writer dropped them
    /// under its quota): it lists the directory again and goes on from the oldest segment left,
    /// after finishing the segment it had open (its records are still readable there).
    @Test func aListedSegmentDroppedBeforeItIsReadIsPassedOver() throws {
        try withTemporaryDirectory { dir in
            let writer = try BeaconLog(configuration: writerConfig(dir, maxBytes: 16 << 10))
            var appended = 0
            func append(_ count: Int) throws {
                for _ in 0..<count {
                    _ = try writer.append(numbered(appended, pad: 30))
                    appended += 1
                }
                try writer.commit(sync: false)
            }
            try append(150)
            #expect(try segmentNumbers(dir).count >= 3)
            let fs = FaultyFileSystem()
            let reader = try BeaconLog(configuration: readerConfig(dir, fs))
            var batch = try reader.read(maxRecords: 10)
            var seqs = batch.seqs
            try reader.acknowledge(through: batch.end)
            let first = try rawLines(segmentPath(dir, 0)).compactMap(\.seq)
            try append(400)
            let left = try segmentNumbers(dir)
            #expect(!left.contains(1), "the writer should have dropped the segments the reader listed")
            let oldestLeft = try #require(try rawLines(segmentPath(dir, left[0])).first?.seq)
            repeat {
                batch = try reader.read(maxRecords: 25)
                seqs += batch.seqs
                if !batch.isEmpty { try reader.acknowledge(through: batch.end) }
            } while !batch.isEmpty
            #expect(seqs == first + Array(oldestLeft..<UInt64(appended)))
            #expect(try segmentNumbers(dir).count == 1)
            try reader.close()
            try writer.close()
        }
    }
}
