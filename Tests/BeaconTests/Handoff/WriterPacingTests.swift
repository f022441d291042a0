import BeaconLog
import BeaconTestSupport
import Foundation
import Glibc
import Synchronization
import Testing
import BeaconTestTraits
@testable import Beacon

/// The writer thread commits as the durability policy asks and no more often: a trickle of
/// records costs one commit per interval (not one wakeup per record), N queued records or a
/// waiter (`sync`, close) end the gathering early, and `.everyRecord` takes each record at once.
@Suite(.blocking) struct WriterPacingTests {
    /// A writer on a new log under `durability`, counting the batches it hands to the log.
    static func withWriter(_ durability: BeaconLog.Durability, capacity: Int = 1 << 20,
                           _ body: (EventWriter, BeaconLog, _ batches: @Sendable () -> Int) throws -> Void) throws {
        try withTemporaryDirectory { dir in
            var config = BeaconLog.Configuration(directory: dir)
            config.durability = durability
            let log = try BeaconLog(configuration: config)
            let batches = Mutex(0)
            let writer = EventWriter(log: log, capacity: capacity, backpressure: .dropNewest,
                                     hooks: .init(onAppended: { _ in batches.withLock { $0 += 1 } }, onFailure: { _, _, _ in }))
            try body(writer, log, { batches.withLock { $0 } })
            writer.close()
            try log.close()
        }
    }

    static func record(_ i: Int) -> [UInt8] { Array(#"{"i":\#(i)}"#.utf8) }

    /// Under `.batched` with a long interval: the first record is committed at once; the records
    /// that trickle in after it, one every 2 ms, wait for the interval (no batch per record);
    /// `waitUntilWritten` takes them at once (not after the interval), in one commit, durable.
    @Test(arguments: [1, 2, 10, 40])
    func aTrickleIsGatheredUntilTheIntervalOrAWaiter(_ trickle: Int) throws {
        try Self.withWriter(.batched(records: 1000, interval: .seconds(120))) { writer, log, batches in
            #expect(writer.enqueue(Self.record(0)).isQueued)
            #expect(eventually(within: 30) { batches() == 1 && log.stats.durableRecords == 1 })
            for i in 1...trickle {
                usleep(2000)
                #expect(writer.enqueue(Self.record(i)).isQueued)
            }
            usleep(50_000)
            #expect(batches() == 1, "the trickle must wait for the interval, not wake the writer per record")
            let start = monotonicNanoseconds()
            writer.waitUntilWritten()
            #expect(monotonicNanoseconds() - start < 60_000_000_000, "waitUntilWritten must not wait for the interval")
            #expect(batches() == 2)
            #expect(log.stats.durableRecords == UInt64(trickle + 1))
            let read = try log.read(maxRecords: 1000)
            #expect(read.records.map { Array($0) } == (0...trickle).map(Self.record))
        }
    }

    /// N queued records end the gathering without a waiter and without the interval, for every
    /// N from 1 to 8; the records before the N-th do not wake the writer.
    @Test(arguments: 1...8)
    func theRecordCountEndsTheGathering(_ n: Int) throws {
        try Self.withWriter(.batched(records: n, interval: .seconds(120))) { writer, log, batches in
            #expect(writer.enqueue(Self.record(0)).isQueued)
            #expect(eventually(within: 30) { batches() == 1 && writer.writerWait == .gathering })
            let woken = writer.wakeups
            for i in 1..<n { #expect(writer.enqueue(Self.record(i)).isQueued) }
            usleep(20_000)
            #expect(writer.wakeups == woken, "records below the count must not wake a gathering writer")
            #expect(batches() == 1)
            #expect(writer.enqueue(Self.record(n)).isQueued)
            #expect(writer.wakeups == woken + 1)
            #expect(eventually(within: 30) { log.stats.durableRecords == UInt64(n + 1) })
        }
    }

    /// Half the capacity in bytes ends the gathering too, so producers never find the hand-off
    /// full while the writer waits for its interval.
    @Test func halfTheCapacityEndsTheGathering() throws {
        try Self.withWriter(.batched(records: 1000, interval: .seconds(120)), capacity: 1000) { writer, log, batches in
            #expect(writer.enqueue(Self.record(0)).isQueued)
            #expect(eventually(within: 30) { batches() == 1 && writer.writerWait == .gathering })
            let woken = writer.wakeups
            var queued = 1
            while writer.wakeups == woken && queued < 200 {
                #expect(writer.enqueue(Self.record(queued)).isQueued)
                queued += 1
            }
            #expect(queued * 7 < 1000, "the writer must be woken before the hand-off is full")
            #expect(eventually(within: 30) { log.stats.durableRecords == UInt64(queued) })
        }
    }

    /// `.everyRecord`: each record is taken and fsynced at once, one after the other.
    @Test func everyRecordTakesEachRecordAtOnce() throws {
        try Self.withWriter(.everyRecord) { writer, log, _ in
            for i in 0..<20 {
                #expect(writer.enqueue(Self.record(i)).isQueued)
                #expect(eventually(within: 30) { log.stats.durableRecords == UInt64(i + 1) })
            }
        }
    }

    /// Closing a gathering writer writes what it gathered, at once.
    @Test func closeWritesWhatIsGathered() throws {
        try withTemporaryDirectory { dir in
            var config = BeaconLog.Configuration(directory: dir)
            config.durability = .batched(records: 1000, interval: .seconds(120))
            let log = try BeaconLog(configuration: config)
            let writer = EventWriter(log: log, capacity: 1 << 20, backpressure: .dropNewest, hooks: .init(onAppended: nil, onFailure: { _, _, _ in }))
            for i in 0..<10 { #expect(writer.enqueue(Self.record(i)).isQueued) }
            let start = monotonicNanoseconds()
            writer.close()
            #expect(monotonicNanoseconds() - start < 60_000_000_000)
            #expect(log.stats.durableRecords == 10)
            try log.close()
        }
    }
}
