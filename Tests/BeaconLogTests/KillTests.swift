import Foundation
import Glibc
import Testing
@testable import BeaconLog

/// kill -9 at random moments while a child process appends, under each durability policy
/// (DESIGN §4: a process crash loses nothing that `write(2)` accepted, and never what was reported
/// durable). After each kill: recovery, a clean verify, a gap-free in-order prefix `{"n":i}` at
/// seq i holding every record reported durable, and new appends accepted; the next child continues.
@Suite struct KillTests {
    @Test(arguments: ["every", "batched", "none"])
    func killNineLoop(policy: String) throws {
        var rng = SeededGenerator(seed: UInt64(policy.utf8.reduce(0) { $0 &* 31 &+ UInt64($1) }))
        let rounds = 15
        try withTemporaryDirectory { dir in
            var total: UInt64 = 0
            var killedMidway = 0
            for round in 0..<rounds {
                let child = try ChildProcess(["log", dir, policy, "1000000", "4096"])
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
}
