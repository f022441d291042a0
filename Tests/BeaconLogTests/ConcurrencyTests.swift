import Foundation
import Glibc
import Synchronization
import Testing
import BeaconTestSupport
import BeaconTestTraits
@testable import BeaconLog
import FaultInjection

/// Appends from several threads at once, with a reader acknowledging meanwhile (all methods are
/// documented thread-safe): seqs are unique and gap-free, each thread's records keep their order,
/// every returned seq holds that thread's record, and nothing is lost, also while the disk is full.
@Suite(.blocking) struct ConcurrencyTests {
    /// Whether `lastError` is the full disk's: "BeaconLog error (diskFull): write failed: No space
    /// left on device; …" when the background flush met it (no lower-case "full" in it: the test
    /// looked for one, and failed whenever no append itself had thrown).
    static func saysDiskFull(_ lastError: String?) -> Bool {
        lastError.map { $0.contains("(diskFull)") || $0.contains("No space left") } ?? false
    }

    @Test(arguments: [BeaconLog.Durability.everyRecord, .batched(records: 16, interval: .milliseconds(1)), .none], [false, true])
    func concurrentAppendsWithAReader(durability: BeaconLog.Durability, diskFillsUp: Bool) throws {
        let threads = 4
        let perThread = durability == .everyRecord ? 150 : 600
        try withTemporaryDirectory { dir in
            let fs = FaultyFileSystem()
            let log = try BeaconLog(configuration: faultyConfig(dir, fs, durability: durability))
            // seq → record, for appends that returned a seq or kept their record; refused records.
            let accepted = Mutex<[UInt64: String]>([:])
            let refused = Mutex<Set<String>>([])
            let stop = Atomic<Bool>(false)
            let delivered = Mutex<[UInt64]>([])
            let reader = Thread {
                while !stop.load(ordering: .acquiring) {
                    guard let batch = try? log.read(maxRecords: 40), !batch.isEmpty else { usleep(200); continue }
                    // Delivered once acknowledged; a failed acknowledgement (disk full) reads the batch again.
                    if (try? log.acknowledge(through: batch.end)) != nil {
                        delivered.withLock { $0 += batch.seqs }
                    }
                }
            }
            reader.start()
            if diskFillsUp { fs.spaceLeft = 3000 }
            let errors = Atomic<Int>(0)
            DispatchQueue.concurrentPerform(iterations: threads) { t in
                for i in 0..<perThread {
                    let record = #"{"t":\#(t),"i":\#(i)}"#
                    do {
                        let seq = try log.append(record)
                        accepted.withLock { $0[seq] = record }
                    } catch let error as BeaconLogError {
                        errors.add(1, ordering: .relaxed)
                        #expect(error.code == .diskFull, "\(error)")
                        if let kept = error.keptSeqs {
                            accepted.withLock { $0[kept.lowerBound] = record }
                        } else {
                            refused.withLock { _ = $0.insert(record) }
                        }
                    } catch {
                        Issue.record("append threw an error that is not a BeaconLogError: \(error)")
                    }
                }
            }
            if diskFillsUp {
                // Give the background flush (and the reader's acknowledgements) time to meet the
                // full disk: at least 30 ms, and until it has (a loaded machine ran no flush within
                // a fixed 30 ms once), for at most 30 s.
                usleep(30_000)
                let end = ContinuousClock.now + .seconds(30)
                while errors.load(ordering: .relaxed) == 0, !Self.saysDiskFull(log.stats.lastError), ContinuousClock.now < end { usleep(1_000) }
                fs.spaceLeft = nil
            }
            try log.sync()
            // Let the reader catch up (up to 60 s by the clock: 5,000 sleeps of 1 ms were about
            // 5 s, short for a loaded machine), then stop it.
            let total = log.stats.nextSeq
            _ = eventually(within: 60) { (delivered.withLock { $0.last } ?? 0) + 1 >= total }
            stop.store(true, ordering: .releasing)
            while !reader.isFinished { usleep(500) }
            let seen = delivered.withLock { $0 }
            let lastError = log.stats.lastError
            #expect(seen == Array(0..<total), "the reader saw \(seen.count) of \(total), first gap near \(zip(seen, 0...).first { $0.0 != UInt64($0.1) }.map { "\($0)" } ?? "-")")
            try log.close()

            let check = try BeaconLog(configuration: smallConfig(dir))
            var all: [(UInt64, String)] = []
            var cursor: LogPosition = check.oldestPosition
            while true {
                let batch = try check.read(from: cursor, maxRecords: 1000)
                if batch.isEmpty { break }
                all += zip(batch.seqs, batch.records.map { String(decoding: $0, as: UTF8.self) })
                cursor = batch.end
            }
            try check.close()
            let byThread = Dictionary(grouping: all) { $0.1.split(separator: ",")[0] }
            let acceptedNow = accepted.withLock { $0 }
            let refusedNow = refused.withLock { $0 }
            // Acknowledged segments are deleted: compare what is still on disk.
            let first = all.first?.0 ?? total
            #expect(all.map(\.0) == Array(first..<total))
            for (seq, record) in all {
                #expect(acceptedNow[seq] == record, "seq \(seq) holds \(record), the append got \(acceptedNow[seq] ?? "nothing")")
                #expect(!refusedNow.contains(record))
            }
            for (_, records) in byThread {
                let indexes = records.map { Int($0.1.split(separator: ":").last!.dropLast())! }
                #expect(indexes == indexes.sorted(), "a thread's records are out of order")
            }
            #expect(UInt64(acceptedNow.count) == total)
            // Under .none the background flush meets the full disk, keeps the records and retries: stats tell.
            let noticed = errors.load(ordering: .relaxed) > 0 || Self.saysDiskFull(lastError)
            #expect(noticed == diskFillsUp, "\(lastError ?? "no error")")
        }
    }
}
