import Foundation
import Glibc
import Testing
import BeaconTestTraits
@testable import BeaconLog

/// kill -9 at random moments while a child process appends, under each durability policy
/// (a process crash loses nothing that `write(2)` accepted, and never what was reported
/// durable). After each kill: recovery, a clean verify, a gap-free in-order prefix `{"n":i}` at
/// seq i holding every record reported durable, and new appends accepted; the next child continues.
@Suite(.blocking) struct KillTests {
    @Test(arguments: ["every", "batched", "none"])
    func killNineLoop(policy: String) throws {
        var rng = SeededGenerator(seed: UInt64(policy.utf8.reduce(0) { $0 &* 31 &+ UInt64($1) }))
        let rounds = 12
        try withTemporaryDirectory { dir in
            var total: UInt64 = 0
            var killedMidway = 0
            for round in 0..<rounds {
                let child = try ChildProcess(["log", dir, policy, "1000000", "4096"])
                defer { child.kill9() }
                try child.waitForLine { $0 == "ready" }
                // A random moment: after a random number of durable reports, plus up to 15 ms.
                let reports = Int.random(in: 0...(policy == "every" ? 60 : 6), using: &rng)
                if reports > 0 { try child.waitForLine { $0.hasPrefix("durable ") && child.lines.filter { $0.hasPrefix("durable ") }.count >= reports } }
                usleep(UInt32.random(in: 0...15_000, using: &rng))
                child.kill9()
                let lines = child.lines
                if !lines.contains("done") { killedMidway += 1 }
                let lastDurable = lines.compactMap { $0.hasPrefix("durable ") ? UInt64($0.dropFirst(8)) : nil }.max()

                let log = try BeaconLog(configuration: smallConfig(dir))
                let read = try readAll(log)
                let n = UInt64(read.seqs.count)
                #expect(read.seqs == Array(0..<n), "round \(round): not a gap-free prefix")
                #expect(read.records == (0..<Int(n)).map { numbered($0) }, "round \(round): records do not match their seq")
                #expect(read.skipped == 0, "round \(round)")
                #expect(n >= total, "round \(round): records of earlier rounds are gone (\(n) < \(total))")
                if let lastDurable {
                    #expect(n > lastDurable, "round \(round): record \(lastDurable) was reported durable but the log ends at \(n)")
                }
                // Accepts new records with the next seq (the next child continues after it).
                #expect(try log.append(numbered(Int(n))) == n)
                total = n + 1
                try log.close()
                try expectClean(dir)
            }
            print("kill -9 loop \(policy): \(rounds) kills, \(total) records survived in all")
            #expect(killedMidway == rounds)
            #expect(total > UInt64(rounds))
        }
    }

    /// The sidecar layout: a child appends with `.write` access and is killed at random moments,
    /// then a new child takes over (recovering the torn tail), while one long-lived `.read`
    /// instance here reads and acknowledges throughout. The reader receives every record once, in
    /// order, `{"n":i}` at seq i, including every record reported durable, and nothing corrupt.
    @Test(arguments: ["every", "batched", "none"])
    func writerKilledUnderALiveReader(policy: String) throws {
        var rng = SeededGenerator(seed: 0x51DE + UInt64(policy.count))
        let rounds = 6
        try withTemporaryDirectory { dir in
            // The directory must exist before the reader opens it: let the first child create it.
            var config = smallConfig(dir)
            config.access = .read
            var reader: BeaconLog?
            var received: [UInt64] = []
            var contents: [String] = []
            var lastDurable: UInt64?
            /// Reads and acknowledges until the log is drained (or `batches` batches, while a writer runs).
            func drain(batches: Int = 20_000) throws {
                guard let reader else { return }
                for _ in 0..<batches {
                    let batch = try reader.read(maxRecords: Int.random(in: 1...100, using: &rng))
                    if batch.isEmpty { return }
                    if received.count > 2_000_000 { break }
                    if let first = batch.firstSeq, first != UInt64(received.count) {
                        Issue.record("the reader got seq \(first) after \(received.count) records (batch \(batch.seqs.prefix(5)), start \(batch.start), end \(batch.end))")
                        received += batch.seqs
                        return
                    }
                    received += batch.seqs
                    contents += batch.records.map { String(decoding: $0, as: UTF8.self) }
                    try reader.acknowledge(through: batch.end)
                }
                if batches == 20_000 { Issue.record("the reader did not reach the end of the log: \(received.count) records") }
            }
            for _ in 0..<rounds {
                let child = try ChildProcess(["log", dir, policy, "1000000", "4096", "write"])
                defer { child.kill9() }
                try child.waitForLine { $0 == "ready" }
                if reader == nil { reader = try BeaconLog(configuration: config) }
                let reports = Int.random(in: 0...(policy == "every" ? 40 : 4), using: &rng)
                if reports > 0 { try child.waitForLine { _ in child.lines.filter { $0.hasPrefix("durable ") }.count >= reports } }
                try drain(batches: Int.random(in: 1...10, using: &rng))
                usleep(UInt32.random(in: 0...5000, using: &rng))
                child.kill9()
                if let d = child.lines.compactMap({ $0.hasPrefix("durable ") ? UInt64($0.dropFirst(8)) : nil }).max() { lastDurable = d }
                try drain()
            }
            // A last writer recovers the tail; the reader takes what remains.
            let last = try ChildProcess(["log", dir, policy, "10", "4096", "write"])
            defer { last.kill9() }
            #expect(last.waitForExit() == 0)
            try drain()
            let n = UInt64(received.count)
            #expect(received == Array(0..<n), "not a gap-free, once-only sequence: \(zip(received, 0...).first { $0.0 != UInt64($0.1) }.map { "\($0)" } ?? "")")
            #expect(contents == (0..<Int(n)).map { numbered($0) })
            if let lastDurable { #expect(n > lastDurable, "record \(lastDurable) was reported durable; the reader got \(n)") }
            #expect(reader?.stats.skippedCorrupt == 0, "the reader counted torn tails as corrupt records")
            try reader?.close()
            try expectClean(dir)
        }
    }
}
