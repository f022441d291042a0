import Foundation
import Glibc
import Testing
@testable import BeaconLog
import FaultInjection

/// `close()` whose final commit fails: it reports the error and never loses the records silently.
@Suite("close() with a failing final commit")
struct CloseFaultTests {
    /// A configuration whose group commit never fires before `close()`: the records of the test are
    /// all written by close's final commit.
    static func closeCommits(_ dir: String, _ fs: FaultyFileSystem) -> BeaconLog.Configuration {
        faultyConfig(dir, fs, durability: .batched(records: 10_000, interval: .seconds(3600)))
    }

    /// A fault on close's write or fsync that clears (once, or until the test clears it).
    struct Fault: CustomTestStringConvertible, Sendable {
        var operation: FaultyFileSystem.Operation
        var errno: Int32
        /// Fires once; otherwise until `clearFaults()`.
        var once: Bool
        var testDescription: String { "\(operation) fails with \(errno == ENOSPC ? "ENOSPC" : "EIO") \(once ? "once" : "until cleared")" }
    }

    @Test("close() reports the error, keeps the records, and a later close() or sync() makes them durable", arguments: [
        Fault(operation: .write, errno: ENOSPC, once: true), Fault(operation: .write, errno: ENOSPC, once: false),
        Fault(operation: .write, errno: EIO, once: true), Fault(operation: .write, errno: EIO, once: false),
    ], [false, true])
    func failedCloseKeepsTheRecords(fault: Fault, retryWithSync: Bool) throws {
        try withTemporaryDirectory { dir in
            let fs = FaultyFileSystem()
            let log = try BeaconLog(configuration: Self.closeCommits(dir, fs))
            for i in 0..<3 { try log.append(numbered(i)) }
            try log.sync()  // three durable before the fault
            for i in 3..<10 { try log.append(numbered(i)) }
            fs.inject(fault.operation, errno: fault.errno, path: ".jsonl", times: fault.once ? 1 : nil)
            let error = expectLogError(fault.errno == ENOSPC ? .diskFull : .io) { try log.close() }
            #expect(error?.message.contains("still open") == true && error?.message.contains("7 records") == true, "\(String(describing: error))")
            #expect(error?.keptSeqs == nil)
            if !fault.once {
                // Still failing: every later attempt says so; none claims success.
                _ = expectLogError(fault.errno == ENOSPC ? .diskFull : .io) { try log.close() }
                _ = expectLogError(fault.errno == ENOSPC ? .diskFull : .io) { try log.sync() }
                fs.clearFaults()
            }
            if retryWithSync { try log.sync() }
            try log.close()
            #expect(log.stats.durableSeq == 9)
            let again = try BeaconLog(configuration: smallConfig(dir))
            #expect(try readAll(again).records == (0..<10).map { numbered($0) })
            try again.close()
            try expectClean(dir)
        }
    }

    @Test("an fsync error at close is repaired by rewriting the records; if that fails too, every later close() reports it")
    func fsyncFailsAtClose() throws {
        for persistent in [false, true] {
            try withTemporaryDirectory { dir in
                let fs = FaultyFileSystem()
                let log = try BeaconLog(configuration: Self.closeCommits(dir, fs))
                for i in 0..<3 { try log.append(numbered(i)) }
                try log.sync()
                for i in 3..<10 { try log.append(numbered(i)) }
                fs.inject(.sync, errno: EIO, path: ".jsonl", times: persistent ? nil : 1)
                if !persistent {
                    try log.close()  // the rewrite into a fresh segment made them durable
                    let again = try BeaconLog(configuration: smallConfig(dir))
                    #expect(try readAll(again).records == (0..<10).map { numbered($0) })
                    try again.close()
                    return
                }
                let failure = expectLogError(.failed) { try log.close() }
                #expect(failure?.message.contains("from seq 3 on were cut off") == true, "\(String(describing: failure))")
                // Closed, and failed: every later close() says so, never a silent success.
                #expect(expectLogError(.failed) { try log.close() }?.message == failure?.message)
                fs.clearFaults()
                let again = try BeaconLog(configuration: smallConfig(dir))
                // Exactly what was durable: the records whose fsync failed were cut off, not half kept.
                #expect(try readAll(again).records == (0..<3).map { numbered($0) })
                #expect(try again.append(numbered(3)) == 3)
                try again.close()
                try expectClean(dir)
            }
        }
    }

    @Test("abandon() after a failed close() leaves exactly the durable records in the directory")
    func abandonCutsWhatIsNotDurable() throws {
        try withTemporaryDirectory { dir in
            let fs = FaultyFileSystem()
            let log = try BeaconLog(configuration: faultyConfig(dir, fs, durability: .none, segmentBytes: 1 << 20, maxBytes: 4 << 20))
            for i in 0..<3 { try log.append(numbered(i)) }
            try log.sync()
            // Over the write threshold: written to the segment, not fsynced (`.none`).
            for i in 3..<80 { try log.append(numbered(i, pad: 1000)) }
            fs.inject(.write, errno: ENOSPC, path: ".jsonl")
            for i in 80..<85 { try? log.append(numbered(i)) }
            _ = expectLogError(.diskFull) { try log.close() }
            #expect(log.abandon())
            #expect(log.stats.durableSeq == 2)
            fs.clearFaults()
            let again = try BeaconLog(configuration: smallConfig(dir))
            #expect(try readAll(again).records == (0..<3).map { numbered($0) })
            try again.close()
        }
    }
}
