import Foundation
import Testing
@testable import BeaconLog

/// A quota drop that deletes records a reader has already read: they count as dropped only until
/// their batch is acknowledged (they were delivered), so `dropped` counts only records never
/// delivered and delivered + dropped + pending == appended.
@Suite struct QuotaInFlightTests {
    /// Appends numbered records until `done` holds; returns the next index.
    func append(_ log: BeaconLog, from start: Int, until done: () throws -> Bool) throws -> Int {
        var i = start
        while try !done() {
            try log.append(numbered(i, pad: 40))
            i += 1
        }
        return i
    }

    func expectBalanced(_ log: BeaconLog, appended: Int, sourceLocation: SourceLocation = #_sourceLocation) {
        let stats = log.stats
        #expect(stats.acknowledgedRecords + stats.dropped[.quotaDeleted, default: 0] + stats.pendingRecords == UInt64(appended),
                "acknowledged \(stats.acknowledgedRecords) + dropped \(stats.dropped) + pending \(stats.pendingRecords) == appended \(appended)",
                sourceLocation: sourceLocation)
    }

    /// A batch read from segment 0, in flight while the quota drops segment 0, then acknowledged
    /// in `parts` steps: each acknowledgement moves its records from dropped to acknowledged.
    @Test(arguments: [1, 2, 10])
    func readThenDroppedThenDeliveredIsNotDropped(parts: Int) throws {
        try withTemporaryDirectory { dir in
            let config = fastConfig(dir, durability: .everyRecord, segmentBytes: 4096, maxBytes: 3 * 4096)
            let log = try BeaconLog(configuration: config)
            var n = try append(log, from: 0) { try segmentNumbers(dir).count >= 2 }
            let inSegment0 = UInt64(try rawLines(segmentPath(dir, 0)).count)
            let batch = try log.read(maxRecords: 10)
            #expect(batch.seqs == Array(0..<10))
            n = try append(log, from: n) { try segmentNumbers(dir).first != 0 }
            // Not delivered yet (the send may still fail): counted as dropped.
            #expect(log.stats.dropped[.quotaDeleted] == inSegment0)
            expectBalanced(log, appended: n)
            let step = 10 / parts
            for part in 1...parts {
                try log.acknowledge(through: batch.end(after: part * step - 1))
                #expect(log.stats.dropped[.quotaDeleted] == inSegment0 - UInt64(part * step))
                #expect(log.stats.acknowledgedRecords == UInt64(part * step))
                expectBalanced(log, appended: n)
            }
            // Acknowledging again changes nothing.
            try log.acknowledge(through: batch.end)
            #expect(log.stats.dropped[.quotaDeleted] == inSegment0 - 10)
            // Reading resumes after the drop.
            #expect(try log.read(maxRecords: 1).firstSeq == inSegment0)
            try log.close()
            let reopened = try BeaconLog(configuration: config)
            #expect(reopened.stats.dropped[.quotaDeleted] == inSegment0 - 10, "the corrected count is the one kept")
            try reopened.close()
        }
    }

    /// A batch spanning the dropped segment and the next one: its acknowledgement counts every
    /// record once, none as dropped.
    @Test func batchAcrossTheDroppedSegmentCountsOnce() throws {
        try withTemporaryDirectory { dir in
            let config = fastConfig(dir, durability: .everyRecord, segmentBytes: 4096, maxBytes: 3 * 4096)
            let log = try BeaconLog(configuration: config)
            var n = try append(log, from: 0) { try segmentNumbers(dir).count >= 2 }
            let inSegment0 = try rawLines(segmentPath(dir, 0)).count
            n = try append(log, from: n) { try segmentNumbers(dir).count >= 3 }
            let batch = try log.read(maxRecords: inSegment0 + 3)
            #expect(batch.count == inSegment0 + 3)
            n = try append(log, from: n) { try segmentNumbers(dir).first != 0 }
            #expect(try segmentNumbers(dir).first == 1, "only segment 0 was dropped")
            try log.acknowledge(through: batch.end)
            #expect(log.stats.dropped[.quotaDeleted, default: 0] == 0)
            #expect(log.stats.acknowledgedRecords == UInt64(inSegment0 + 3))
            expectBalanced(log, appended: n)
            try log.close()
        }
    }

    /// A batch read but never acknowledged (its send failed) stays dropped; records never read
    /// count as dropped at once.
    @Test func readButNeverDeliveredStaysDropped() throws {
        try withTemporaryDirectory { dir in
            let config = fastConfig(dir, durability: .everyRecord, segmentBytes: 4096, maxBytes: 3 * 4096)
            let log = try BeaconLog(configuration: config)
            var n = try append(log, from: 0) { try segmentNumbers(dir).count >= 2 }
            _ = try log.read(maxRecords: 10)
            n = try append(log, from: n) { try segmentNumbers(dir).count >= 2 && segmentNumbers(dir).first! >= 2 }
            let firstOnDisk = try #require(try rawLines(segmentPath(dir, try segmentNumbers(dir).first!)).first?.seq)
            let retry = try log.read(maxRecords: 5)
            #expect(retry.firstSeq == firstOnDisk)
            try log.acknowledge(through: retry.end)
            #expect(log.stats.dropped[.quotaDeleted] == firstOnDisk)
            #expect(log.stats.acknowledgedRecords == 5)
            expectBalanced(log, appended: n)
            try log.close()
        }
    }
}
