import Foundation
import Testing
@testable import BeaconLog
import FaultInjection

/// The disk quota (`maxBytes`) under `.dropOldest` and `.rejectNew`, and `maxRecordBytes`.
@Suite struct QuotaTests {
    /// The seqs each segment on disk holds now.
    func seqsBySegment(_ dir: String) throws -> [UInt64: [UInt64]] {
        var out: [UInt64: [UInt64]] = [:]
        for number in try segmentNumbers(dir) {
            out[number] = try rawLines(segmentPath(dir, number)).compactMap(\.seq)
        }
        return out
    }

    /// `.dropOldest`, one append at a time: whenever segments disappear, `dropped[.quotaDeleted]` grows by
    /// exactly the pending records they held (those at or after the checkpoint), the checkpoint
    /// moves to the oldest remaining record, drops are not counted as acknowledged, the disk stays
    /// within the quota, and reading resumes at the first record still on disk.
    @Test(arguments: [0, 30])
    func dropOldestCountsExactlyTheRecordsItDeletes(acknowledgeFirst: Int) throws {
        try withTemporaryDirectory { dir in
            let config = fastConfig(dir, durability: .everyRecord, segmentBytes: 4096, maxBytes: 3 * 4096)
            let log = try BeaconLog(configuration: config)
            var expectedDropped: UInt64 = 0
            var drops = 0
            var before = try seqsBySegment(dir)
            for i in 0..<600 {
                let checkpointBefore = log.checkpoint.seq
                try log.append(numbered(i, pad: 40))
                let after = try seqsBySegment(dir)
                for (number, seqs) in before where after[number] == nil {
                    drops += 1
                    expectedDropped += UInt64(seqs.filter { $0 >= checkpointBefore }.count)
                }
                before = after
                #expect(log.stats.dropped[.quotaDeleted, default: 0] == expectedDropped, "after append \(i)")
                #expect(log.stats.diskBytes <= UInt64(config.maxBytes))
                if i == acknowledgeFirst - 1 {
                    try log.acknowledge(through: try log.read(maxRecords: acknowledgeFirst).end)
                    before = try seqsBySegment(dir)
                }
            }
            #expect(drops > 5)
            let oldest = try #require(try segmentNumbers(dir).first)
            let firstOnDisk = try #require(try rawLines(segmentPath(dir, oldest)).first?.seq)
            #expect(expectedDropped == firstOnDisk - UInt64(acknowledgeFirst))
            #expect(log.checkpoint.seq == firstOnDisk)
            #expect(log.stats.acknowledgedRecords == UInt64(acknowledgeFirst))
            let read = try readAll(log)
            #expect(read.seqs == Array(firstOnDisk..<600))
            try log.close()
            let reopened = try BeaconLog(configuration: config)
            #expect(reopened.stats.dropped[.quotaDeleted] == expectedDropped)
            #expect(try reopened.read(maxRecords: 1).firstSeq == firstOnDisk)
            try reopened.close()
            try expectClean(dir)
        }
    }

    /// A `.write` instance (another instance reads, without acknowledging) counts each dropped
    /// segment's records once, however many drops happen.
    @Test func writeOnlyWriterCountsDropsOnce() throws {
        try withTemporaryDirectory { dir in
            var writerConfig = fastConfig(dir, durability: .everyRecord, segmentBytes: 4096, maxBytes: 3 * 4096)
            writerConfig.access = .write
            var readerConfig = smallConfig(dir)
            readerConfig.access = .read
            let writer = try BeaconLog(configuration: writerConfig)
            let reader = try BeaconLog(configuration: readerConfig)
            for i in 0..<500 { try writer.append(numbered(i, pad: 40)) }
            let oldest = try #require(try segmentNumbers(dir).first)
            let firstOnDisk = try #require(try rawLines(segmentPath(dir, oldest)).first?.seq)
            #expect(firstOnDisk > 100)
            #expect(writer.stats.dropped[.quotaDeleted] == firstOnDisk)
            let batch = try reader.read(maxRecords: 1000)
            #expect(batch.firstSeq == firstOnDisk)
            #expect(batch.lastSeq == 499)
            try reader.close()
            try writer.close()
        }
    }

    /// `.rejectNew`: appends past the quota are refused with `.quotaExceeded` and counted, nothing
    /// already stored is dropped, and once records are acknowledged (their segments deleted)
    /// appends are accepted again.
    @Test func rejectNewRefusesAndCounts() throws {
        try withTemporaryDirectory { dir in
            var config = fastConfig(dir, durability: .everyRecord, segmentBytes: 4096, maxBytes: 3 * 4096)
            config.quotaPolicy = .rejectNew
            let log = try BeaconLog(configuration: config)
            var accepted = 0
            var refused = 0
            for i in 0..<400 {
                do {
                    #expect(try log.append(numbered(i, pad: 40)) == UInt64(accepted))
                    accepted += 1
                } catch let error as BeaconLogError {
                    #expect(error.code == .quotaExceeded)
                    #expect(error.keptSeqs == nil)
                    refused += 1
                }
            }
            #expect(accepted > 100 && refused > 100)
            #expect(log.stats.refused[.quotaExceeded] == UInt64(refused))
            #expect(log.stats.dropped.isEmpty)
            #expect(log.stats.diskBytes <= UInt64(config.maxBytes))
            #expect(log.stats.nextSeq == UInt64(accepted))
            let all = try log.read(maxRecords: 10_000)
            #expect(all.seqs == Array(0..<UInt64(accepted)))
            try log.acknowledge(through: all.end)
            #expect(try log.append("{}") == UInt64(accepted))
            try log.close()
            let reopened = try BeaconLog(configuration: config)
            #expect(reopened.stats.refused[.quotaExceeded] == UInt64(refused))
            try reopened.close()
        }
    }

    /// `maxRecordBytes`: a record of exactly that size is accepted, one byte more is refused with
    /// `.recordTooLarge` and counted, and a batch holding one such record appends nothing.
    @Test(arguments: [64, 1000, 4096, 10_000])
    func maxRecordBytesIsEnforced(limit: Int) throws {
        try withTemporaryDirectory { dir in
            var config = fastConfig(dir, durability: .everyRecord)
            config.maxRecordBytes = limit
            let log = try BeaconLog(configuration: config)
            let fits = #"{"p":""# + String(repeating: "a", count: limit - 8) + #""}"#
            #expect(fits.utf8.count == limit)
            let over = #"{"p":""# + String(repeating: "a", count: limit - 7) + #""}"#
            #expect(try log.append(fits) == 0)
            _ = expectLogError(.recordTooLarge) { try log.append(over) }
            _ = expectLogError(.recordTooLarge) { try log.append(contentsOf: [Array("{}".utf8), Array(over.utf8)]) }
            #expect(log.stats.refused[.recordTooLarge] == 2)
            #expect(try log.append("{}") == 1)
            #expect(try log.read(maxRecords: 10).records.map { String(decoding: $0, as: UTF8.self) } == [fits, "{}"])
            try log.close()
        }
    }
}

@Suite struct QuotaAccountingTests {
    static let pad = String(repeating: "x", count: 60)

    func config(_ dir: String, access: BeaconLog.Access = .readWrite) -> BeaconLog.Configuration {
        var c = BeaconLog.Configuration(directory: dir)
        c.segmentBytes = 4096
        c.maxBytes = 8192
        c.durability = .none
        c.access = access
        return c
    }

    /// A quota drop moves the checkpoint, but the records it passes were dropped, not acknowledged.
    @Test func aQuotaDropIsNotCountedAsAcknowledged() throws {
        try withTemporaryDirectory { dir in
            let log = try BeaconLog(configuration: config(dir))
            for i in 0..<400 { try log.append(#"{"n":\#(i),"pad":"\#(Self.pad)"}"#) }
            try log.sync()
            let stats = log.stats
            let first = try #require(try log.read(maxRecords: 1).firstSeq)
            #expect(first > 0)
            #expect(stats.dropped[.quotaDeleted] == first)
            #expect(stats.acknowledgedRecords == 0)
            #expect(stats.pendingRecords == 400 - first)
            try log.close()
        }
    }

    /// A writer without the reader lock counts each dropped record once, whatever the reader acknowledged.
    @Test func aWriteOnlyInstanceCountsEachDroppedRecordOnce() throws {
        try withTemporaryDirectory { dir in
            let writer = try BeaconLog(configuration: config(dir, access: .write))
            let reader = try BeaconLog(configuration: config(dir, access: .read))
            for i in 0..<400 { try writer.append(#"{"n":\#(i),"pad":"\#(Self.pad)"}"#) }
            try writer.sync()
            let first = try #require(try reader.read(maxRecords: 1).firstSeq)
            #expect(first > 0)
            #expect(writer.stats.dropped[.quotaDeleted] == first)
            #expect(writer.stats.pendingRecords == 400 - first)
            // The reader takes everything; the next drops hold only records appended after that.
            var batch = try reader.read(maxRecords: 10_000)
            #expect(batch.lastSeq == 399)
            try reader.acknowledge(through: batch.end)
            try reader.close()
            for i in 400..<800 { try writer.append(#"{"n":\#(i),"pad":"\#(Self.pad)"}"#) }
            try writer.sync()
            // A fresh reader: one that kept a segment open could still read it after the drop.
            let reader2 = try BeaconLog(configuration: config(dir, access: .read))
            batch = try reader2.read(maxRecords: 10_000)
            let second = try #require(batch.firstSeq)
            #expect(batch.lastSeq == 799)
            #expect(second > 400)
            #expect(writer.stats.dropped[.quotaDeleted] == first + (second - 400))
            try writer.close()
            try reader2.close()
        }
    }
}
