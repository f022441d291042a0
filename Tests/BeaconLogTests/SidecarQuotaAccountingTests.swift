import Foundation
import Glibc
import Testing
@testable import BeaconLog
import FaultInjection

/// The quota's `dropped` count against what was delivered, when the quota runs in the writer's
/// process and the reader (`beacon send`) in another: every appended record is either delivered
/// (acknowledged) or counted as dropped, never both, never neither. On ef2d39b the reader went on
/// reading a segment the quota had deleted (its descriptor was open) and delivered records the
/// writer had counted as dropped: the count was above the truth.
@Suite struct SidecarQuotaAccountingTests {
    /// A `.write` instance with 4 KiB segments and a 16 KiB quota, and a `.read` instance beside it.
    func instances(_ dir: String) throws -> (writer: BeaconLog, reader: BeaconLog) {
        var writerConfig = fastConfig(dir, durability: .none, segmentBytes: 4096, maxBytes: 16 << 10)
        writerConfig.access = .write
        let writer = try BeaconLog(configuration: writerConfig)
        var readerConfig = fastConfig(dir, durability: .none, segmentBytes: 4096)
        readerConfig.access = .read
        return (writer, try BeaconLog(configuration: readerConfig))
    }

    /// `dropped[.quotaDeleted]` as `beacon status` reports it once both have closed.
    func reportedDrops(_ dir: String) throws -> UInt64 {
        var config = smallConfig(dir)
        config.access = .readOnly
        let status = try BeaconLog(configuration: config)
        defer { try? status.close() }
        return status.stats.dropped[.quotaDeleted, default: 0]
    }

    @Test("the issue's case: a batch read before the quota deletes its segment, delivered after it, is not counted as dropped; what the reader never read is")
    func aBatchInFlightAcrossADropIsNotCountedAsDropped() throws {
        try withTemporaryDirectory { dir in
            let (writer, reader) = try instances(dir)
            for i in 0..<60 { try writer.append(numbered(i, pad: 100)) }
            try writer.commit(sync: false)
            // The sender reads a batch from the oldest segment; the collector is down, so it waits.
            let inFlight = try reader.read(maxRecords: 20)
            #expect(inFlight.seqs == Array(0..<20))
            // Meanwhile the writer goes on and its quota deletes the oldest segments.
            for i in 60..<400 { try writer.append(numbered(i, pad: 100)) }
            try writer.commit(sync: false)
            #expect(try segmentNumbers(dir).first! > inFlight.start.segment, "the batch's segment was deleted")
            // The collector comes back: the batch is delivered, then whatever the reader finds.
            var delivered = inFlight.seqs
            try reader.acknowledge(through: inFlight.end)
            while true {
                let batch = try reader.read(from: reader.checkpoint, maxRecords: 50)
                if batch.isEmpty { break }
                delivered += batch.seqs
                try reader.acknowledge(through: batch.end)
            }
            try reader.close()
            try writer.close()
            #expect(Set(delivered).count == delivered.count, "nothing delivered twice")
            let dropped = try reportedDrops(dir)
            #expect(dropped + UInt64(delivered.count) == 400, "dropped \(dropped), delivered \(delivered.count) of 400")
        }
    }

    @Test("randomized: appends, reads up to three batches ahead, acknowledgements and drops interleaved; dropped + delivered == appended, nothing delivered twice", arguments: 1...8)
    func droppedPlusDeliveredIsAppended(seed: UInt64) throws {
        try withTemporaryDirectory { dir in
            var random = SeededGenerator(seed: seed)
            let (writer, reader) = try instances(dir)
            var appended = 0
            var inFlight: [LogBatch] = []
            var delivered: [UInt64] = []
            var cursor: LogPosition?
            for _ in 0..<300 {
                switch Int.random(in: 0..<10, using: &random) {
                case 0..<5:
                    for _ in 0..<Int.random(in: 1...25, using: &random) {
                        try writer.append(numbered(appended, pad: Int.random(in: 20...200, using: &random)))
                        appended += 1
                    }
                    try writer.commit(sync: false)
                case 5..<8 where inFlight.count < 3:
                    let batch = try reader.read(from: cursor, maxRecords: Int.random(in: 1...30, using: &random))
                    if !batch.isEmpty {
                        inFlight.append(batch)
                        cursor = batch.end
                    }
                default:
                    guard !inFlight.isEmpty else { continue }
                    let batch = inFlight.removeFirst()
                    delivered += batch.seqs
                    try reader.acknowledge(through: batch.end)
                }
            }
            for batch in inFlight {
                delivered += batch.seqs
                try reader.acknowledge(through: batch.end)
            }
            try writer.close()
            while true {
                let batch = try reader.read(from: cursor, maxRecords: 50)
                if batch.isEmpty { break }
                cursor = batch.end
                delivered += batch.seqs
                try reader.acknowledge(through: batch.end)
            }
            try reader.close()
            #expect(Set(delivered).count == delivered.count, "nothing delivered twice")
            #expect(delivered == delivered.sorted(), "in order")
            let dropped = try reportedDrops(dir)
            #expect(dropped > 0, "the quota dropped something")
            #expect(dropped + UInt64(delivered.count) == UInt64(appended), "dropped \(dropped), delivered \(delivered.count) of \(appended)")
        }
    }
}
