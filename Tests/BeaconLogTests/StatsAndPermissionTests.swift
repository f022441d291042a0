import Foundation
import Testing
@testable import BeaconLog

/// File modes (owner only: events can carry personal data) and every `LogStats` field after a
/// scripted scenario.
@Suite struct StatsAndPermissionTests {
    func mode(_ path: String) throws -> Int {
        try #require(FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int)
    }

    /// The directory (and a missing parent it creates) is 0700; segments, checkpoint, locks and
    /// counters are 0600, also after the checkpoint is replaced and the counters rewritten.
    @Test func directoryIs0700AndFiles0600() throws {
        try withTemporaryDirectory { root in
            let dir = root + "/nested/log"
            let log = try BeaconLog(configuration: smallConfig(dir))
            for i in 0..<200 { try log.append(numbered(i, pad: 40)) }
            _ = expectLogError(.invalidRecord) { try log.append("") }
            try log.sync()
            try log.acknowledge(through: try log.read(maxRecords: 10).end)
            try log.acknowledge(through: try log.read(maxRecords: 10).end)
            try log.close()
            #expect(try mode(dir) == 0o700)
            #expect(try mode(root + "/nested") == 0o700)
            let names = try FileManager.default.contentsOfDirectory(atPath: dir).sorted()
            let expected: Set<String> = ["checkpoint", "writer.lock", "reader.lock", "writer.counters", "reader.counters"]
            #expect(expected.isSubset(of: Set(names)), "\(names)")
            #expect(names.filter { $0.hasSuffix(".jsonl") }.count >= 3)
            for name in names {
                let m = try mode(dir + "/" + name)
                #expect(m == 0o600, "\(name) is \(String(m, radix: 8))")
            }
            #expect(!names.contains { $0.hasSuffix(".tmp") })
        }
    }

    /// Every field, step by step: appends, refusals, a partial and a full acknowledgement, a
    /// reopen (session counters restart, loss counters persist), a damaged record.
    @Test func statsAfterAScriptedScenario() throws {
        try withTemporaryDirectory { dir in
            let config = smallConfig(dir, durability: .everyRecord)
            let records = (0..<100).map { numbered($0, pad: 40) }
            let frames = records.enumerated().map { frameLength(seq: UInt64($0.offset), record: Array($0.element.utf8)) }
            do {
                let log = try BeaconLog(configuration: config)
                var s = log.stats
                #expect(s == LogStats())
                for r in records { try log.append(r) }
                s = log.stats
                #expect(s.appendedRecords == 100)
                #expect(s.appendedBytes == UInt64(records.reduce(0) { $0 + $1.utf8.count }))
                #expect(s.durableRecords == 100)
                #expect(s.durableSeq == 99)
                #expect(s.nextSeq == 100)
                #expect(s.pendingRecords == 100)
                #expect(s.diskBytes == UInt64(frames.reduce(0, +)))
                #expect(s.pendingBytes == s.diskBytes)
                #expect(s.segments == (try segmentNumbers(dir)).count)
                #expect(s.segments >= 2)
                #expect(s.acknowledgedRecords == 0)
                #expect(s.acknowledgedSeq == nil)
                #expect(s.dropped.isEmpty && s.refused.isEmpty && s.skippedCorrupt == 0 && s.truncatedBytes == 0)
                #expect(s.checkpointRecovery == nil && s.lastError == nil)

                _ = expectLogError(.invalidRecord) { try log.append("") }
                _ = expectLogError(.invalidRecord) { try log.append("{\n}") }
                try log.acknowledge(through: try log.read(maxRecords: 30).end)
                s = log.stats
                #expect(s.refused == [.invalidRecord: 2])
                #expect(s.acknowledgedRecords == 30)
                #expect(s.acknowledgedSeq == 29)
                #expect(s.pendingRecords == 70)
                #expect(s.pendingBytes == UInt64(frames[30...].reduce(0, +)))
                #expect(s.appendedRecords == 100)

                try log.acknowledge(through: try log.read(maxRecords: 1000).end)
                s = log.stats
                #expect(s.acknowledgedRecords == 100)
                #expect(s.acknowledgedSeq == 99)
                #expect(s.pendingRecords == 0)
                #expect(s.pendingBytes == 0)
                #expect(s.segments == 1)
                let newest = try #require(try segmentNumbers(dir).last)
                #expect(s.diskBytes == (try fileSize(segmentPath(dir, newest))))
                try log.close()
            }
            do {
                let log = try BeaconLog(configuration: config)
                var s = log.stats
                #expect(s.appendedRecords == 0 && s.durableRecords == 0 && s.acknowledgedRecords == 0)
                #expect(s.nextSeq == 100)
                #expect(s.acknowledgedSeq == 99)
                #expect(s.pendingRecords == 0)
                #expect(s.refused == [.invalidRecord: 2])
                #expect(s.checkpointRecovery == nil && s.truncatedBytes == 0)
                for i in 100..<105 { try log.append(numbered(i)) }
                s = log.stats
                #expect(s.appendedRecords == 5 && s.durableRecords == 5 && s.durableSeq == 104 && s.pendingRecords == 5)
                try log.close()
            }
            // Damage record 102's event in place (same length), then reopen and read.
            let newest = try #require(try segmentNumbers(dir).last)
            var bytes = try fileBytes(segmentPath(dir, newest))
            let line = try #require(try rawLines(segmentPath(dir, newest)).first { $0.seq == 102 })
            bytes[line.range.upperBound - 4] ^= 0x01
            try writeFile(segmentPath(dir, newest), bytes)
            let log = try BeaconLog(configuration: config)
            let read = try readAll(log)
            #expect(read.seqs == [100, 101, 103, 104])
            #expect(log.stats.skippedCorrupt == 1)
            #expect(log.stats.pendingRecords == 5)  // an upper bound: the damaged record is still counted
            try log.acknowledge(through: try log.read(maxRecords: 10).end)
            #expect(log.stats.acknowledgedRecords == 5)
            #expect(log.stats.acknowledgedSeq == 104)
            try log.close()
            let again = try BeaconLog(configuration: config)
            #expect(again.stats.skippedCorrupt == 1)
            #expect(again.stats.refused == [.invalidRecord: 2])
            try again.close()
        }
    }
}

@Suite struct PersistedCounterTests {
    /// Drops, refusals and skipped records are still reported after a restart and to a read-only view.
    @Test func lossCountersSurviveReopen() throws {
        try withTemporaryDirectory { dir in
            var config = BeaconLog.Configuration(directory: dir)
            config.segmentBytes = 4096
            config.maxBytes = 8192
            config.durability = .none
            do {
                let log = try BeaconLog(configuration: config)
                for i in 0..<300 { try log.append(#"{"n":\#(i),"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}"#) }
                #expect(throws: BeaconLogError.self) { try log.append("") }
                #expect(throws: BeaconLogError.self) { try log.append("{\"a\":\n1}") }
                try log.close()
                let stats = log.stats
                #expect((stats.dropped[.quotaDeleted] ?? 0) > 0)
                #expect(stats.refused[.invalidRecord] == 2)
            }
            let dropped: UInt64
            do {
                let log = try BeaconLog(configuration: config)
                dropped = log.stats.dropped[.quotaDeleted] ?? 0
                #expect(dropped > 0)
                #expect(log.stats.refused[.invalidRecord] == 2)
                // Everything still there is delivered in order after the dropped prefix.
                let batch = try log.read(maxRecords: 1000)
                #expect(batch.firstSeq == dropped)
                #expect(batch.lastSeq == 299)
                try log.close()
            }
            var readOnly = BeaconLog.Configuration(directory: dir)
            readOnly.access = .readOnly
            let view = try BeaconLog(configuration: readOnly)
            #expect(view.stats.dropped[.quotaDeleted] == dropped)
            #expect(view.stats.refused[.invalidRecord] == 2)
            try view.close()
            let mode = try FileManager.default.attributesOfItem(atPath: dir + "/writer.counters")[.posixPermissions] as? Int
            #expect(mode == 0o600)
        }
    }
}
