import Foundation
import Glibc
import Testing
@testable import BeaconLog
import BeaconTestSupport
import FaultInjection

/// Segments preallocated with `fallocate` (`.everyRecord` and `.batched`): the open segment runs
/// on with zeros past its last record. Those zeros are the end of the data everywhere (opening,
/// reading from another process, `verify`, the roll, quota), never records and never corruption.
@Suite struct PreallocationTests {
    static let hour = Duration.seconds(3600)

    /// The smallest segment size that is preallocated.
    static let segment = 64 * 1024

    /// A configuration with preallocated segments (under `.everyRecord`, `.batched`), fsyncs
    /// skipped (`fallocate` and the rest are real).
    func configured(_ dir: String, durability: BeaconLog.Durability = .none, access: BeaconLog.Access = .readWrite) -> BeaconLog.Configuration {
        var config = smallConfig(dir, durability: durability, segmentBytes: Self.segment, maxBytes: 64 << 20)
        config.access = access
        let fs = FaultyFileSystem()
        fs.skipSyncs = true
        config.fileSystem = fs
        return config
    }

    /// Records of about 450 bytes: 145 or so to a segment.
    func big(_ i: Int) -> String { numbered(i, pad: 400) }

    /// A directory state a crash can leave: segment 0 sealed with records 0..<10, segment 1 as
    /// `newest` says (built from records 10... framed exactly as the writer frames them).
    func crashState(_ dir: String, newest: (_ frames: [[UInt8]]) -> [UInt8]) throws {
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        let sealed = (0..<10).flatMap { Frame.encode(seq: UInt64($0), record: Array(big($0).utf8)) }
        try writeFile(segmentPath(dir, 0), sealed)
        let frames = (10..<20).map { Frame.encode(seq: UInt64($0), record: Array(big($0).utf8)) }
        try writeFile(segmentPath(dir, 1), newest(frames))
    }

    /// Opens the crash state, checks that exactly `expected` records are read, none counted
    /// corrupt, and that a new append continues after them in a new segment.
    func expectRecovers(_ dir: String, expected: Range<UInt64>, sourceLocation: SourceLocation = #_sourceLocation) throws {
        let log = try BeaconLog(configuration: configured(dir, durability: .everyRecord))
        let read = try readAll(log)
        #expect(read.seqs == Array(expected), sourceLocation: sourceLocation)
        #expect(read.skipped == 0 && log.stats.skippedCorrupt == 0, sourceLocation: sourceLocation)
        #expect(try log.append("{}") == expected.upperBound, sourceLocation: sourceLocation)
        try log.close()
        #expect(try readAll(BeaconLog(configuration: configured(dir, access: .readOnly))).seqs == Array(expected) + [expected.upperBound], sourceLocation: sourceLocation)
        try expectClean(dir, sourceLocation: sourceLocation)
    }

    @Test("a live segment is preallocated to segmentBytes; the roll and close cut it to its records; quota counts records, not the space")
    func preallocatedWhileOpenCutWhenSealed() throws {
        try withTemporaryDirectory { dir in
            let log = try BeaconLog(configuration: configured(dir, durability: .everyRecord))
            var sizes: [UInt64: UInt64] = [:]
            for i in 0..<5 {
                let record = Array(big(i).utf8)
                let seq = try log.append(record)
                sizes[0, default: 0] += UInt64(frameLength(seq: seq, record: record))
            }
            #expect(try fileSize(segmentPath(dir, 0)) == UInt64(Self.segment), "the open segment is preallocated")
            #expect(log.stats.diskBytes == sizes[0], "the quota counts the records' bytes")
            try expectClean(dir)  // zeros after the last record of the newest segment are not a problem
            for i in 5..<400 { try log.append(big(i)) }
            let numbers = try segmentNumbers(dir)
            #expect(numbers.count >= 3)
            for number in numbers.dropLast() {
                let bytes = try fileBytes(segmentPath(dir, number))
                #expect(bytes.last == 0x0A && rawLines(of: bytes).allSatisfy { $0.seq != nil }, "a sealed segment ends with its last record")
            }
            #expect(try fileSize(segmentPath(dir, numbers.last!)) == UInt64(Self.segment))
            try log.close()
            let tail = try fileBytes(segmentPath(dir, numbers.last!))
            #expect(tail.count < Self.segment && tail.last == 0x0A, "close cuts the preallocated tail")
            try expectClean(dir)
        }
    }

    @Test("a crash right after a roll: the newest segment is all preallocated zeros; nothing lost, nothing counted")
    func zerosOnly() throws {
        try withTemporaryDirectory { dir in
            try crashState(dir) { _ in [UInt8](repeating: 0, count: Self.segment) }
            try expectClean(dir)
            try expectRecovers(dir, expected: 0..<10)
        }
    }

    @Test("a torn record followed by preallocated zeros: the records before it are kept, the torn bytes reported alone")
    func tornRecordThenZeros() throws {
        try withTemporaryDirectory { dir in
            var kept = 0
            let torn = 37
            try crashState(dir) { frames in
                var bytes = frames.prefix(4).flatMap { $0 }
                kept = bytes.count
                bytes += frames[4].prefix(torn)
                return bytes + [UInt8](repeating: 0, count: Self.segment - bytes.count)
            }
            let report = try BeaconLog.verify(directory: dir)
            #expect(report.problems.count == 1)
            #expect(report.problems.first?.offset == UInt64(kept))
            #expect(report.problems.first?.reason.hasPrefix("an incomplete record of \(torn) bytes") == true, "\(report.problems)")
            try expectRecovers(dir, expected: 0..<14)
        }
    }

    @Test("records that end exactly at the preallocated end (no zero after them): all kept, nothing cut")
    func recordEndsAtThePreallocatedEnd() throws {
        try withTemporaryDirectory { dir in
            try crashState(dir) { frames in
                let bytes = frames.prefix(9).flatMap { $0 }
                // The last record padded to end exactly at segmentBytes, where the writer's space ends.
                for pad in max(0, Self.segment - bytes.count - 200)..<Self.segment {
                    let frame = Frame.encode(seq: 19, record: Array(#"{"n":19,"p":"\#(String(repeating: "x", count: pad))"}"#.utf8))
                    if bytes.count + frame.count == Self.segment { return bytes + frame }
                }
                Issue.record("no padding fills the segment exactly")
                return bytes
            }
            #expect(try fileSize(segmentPath(dir, 1)) == UInt64(Self.segment))
            try expectClean(dir)
            let log = try BeaconLog(configuration: configured(dir, durability: .everyRecord))
            #expect(log.stats.truncatedBytes == 0)
            try log.close()
            try expectRecovers(dir, expected: 0..<20)
        }
    }

    @Test("a reader in another process follows a preallocated writer across rolls: every record once, none counted corrupt")
    func readerInAnotherInstanceAcrossRolls() throws {
        try withTemporaryDirectory { dir in
            let writer = try BeaconLog(configuration: configured(dir, durability: .everyRecord, access: .write))
            let reader = try BeaconLog(configuration: configured(dir, access: .read))
            var seen: [UInt64] = []
            var cursor: LogPosition?
            for i in 0..<400 {
                try writer.append(big(i))
                if i % 37 == 3 {
                    let batch = try reader.read(from: cursor, maxRecords: 1000)
                    seen += batch.seqs
                    if !batch.isEmpty { cursor = batch.end }
                    #expect(batch.skippedCorrupt == 0, "after \(i)")
                }
            }
            try writer.close()
            let rest = try reader.read(from: cursor, maxRecords: 1000)
            seen += rest.seqs
            #expect(seen == Array(0..<400))
            #expect(reader.stats.skippedCorrupt == 0)
            try reader.close()
        }
    }

    /// Every kind of failure of `fallocate`, at each of the first segments: nothing the log
    /// accepted is lost; a file system without it is written without it from then on.
    @Test("fallocate failing with EOPNOTSUPP, ENOSPC, EDQUOT, EIO at each segment: appends go on, nothing lost", arguments: [EOPNOTSUPP, ENOSPC, EDQUOT, EIO])
    func preallocationFaults(errno: Int32) throws {
        for call in 1...3 {
            try withTemporaryDirectory { dir in
                let fs = FaultyFileSystem()
                fs.skipSyncs = true
                fs.inject(.preallocate, errno: errno, onCall: call, times: errno == EOPNOTSUPP ? nil : 1)
                var config = configured(dir, durability: .batched(records: 4, interval: Self.hour))
                config.fileSystem = fs
                let log = try BeaconLog(configuration: config)
                for i in 0..<500 { try log.append(big(i)) }
                try log.sync()
                let preallocations = fs.calls(.preallocate)
                if errno == EOPNOTSUPP {
                    #expect(preallocations.count == call, "after EOPNOTSUPP no segment tries again")
                } else {
                    #expect(preallocations.count == (try segmentNumbers(dir).count), "one try per segment")
                }
                try log.close()
                let read = try readAll(BeaconLog(configuration: configured(dir, access: .readOnly)))
                #expect(read.seqs == Array(0..<500), "errno \(errno) on call \(call)")
                #expect(read.records == (0..<500).map { big($0) })
                try expectClean(dir)
            }
        }
    }

    @Test("a full disk: fallocate fails with ENOSPC and so do the writes: the disk-full path keeps the records, written once space frees")
    func fullDisk() throws {
        try withTemporaryDirectory { dir in
            let fs = FaultyFileSystem()
            fs.skipSyncs = true
            var config = configured(dir, durability: .everyRecord)
            config.fileSystem = fs
            let log = try BeaconLog(configuration: config)
            for i in 0..<200 { try log.append(big(i)) }
            fs.inject(.preallocate, errno: ENOSPC)
            fs.spaceLeft = 0
            var kept: [UInt64] = []
            for i in 200..<400 {
                do {
                    try log.append(big(i))
                } catch let error as BeaconLogError {
                    #expect(error.code == .diskFull)
                    if let seqs = error.keptSeqs { kept += Array(seqs) }
                }
            }
            #expect(!kept.isEmpty, "the disk-full path was taken")
            fs.clearFaults()
            try log.sync()
            try log.close()
            let read = try readAll(BeaconLog(configuration: configured(dir, access: .readOnly)))
            #expect(read.seqs == Array(0..<UInt64(read.seqs.count)))
            #expect(Set(kept).isSubset(of: Set(read.seqs)), "every record kept in memory was written")
            try expectClean(dir)
        }
    }

    static let workloads: [CrashStateTests.Workload] = [
        CrashStateTests.Workload(name: "preallocated segments: a roll, a close, a reopen and more appends", durability: .everyRecord, segmentBytes: segment) { open, script in
            var log = try open()
            for i in 0..<900 { try script.append(log, i) }
            try script.close(log)
            log = try open()
            for i in 900..<940 { try script.append(log, i) }
            try script.close(log)
        },
        CrashStateTests.Workload(name: "preallocation refused (ENOSPC) for the first segment, then a roll into a preallocated one", durability: .batched(records: 3, interval: hour), segmentBytes: segment) { open, script in
            let log = try open()
            script.fs.inject(.preallocate, errno: ENOSPC, onCall: 1, times: 1)
            for i in 0..<900 { try script.append(log, i) }
            try script.close(log)
        },
    ]

    @Test("crash states of preallocating workloads: gap-free FIFO, durable records kept, zeros never read as records", arguments: workloads)
    func crashStates(workload: CrashStateTests.Workload) throws {
        try CrashStateTests.expectCleanCrashStates(workload)
    }
}
