@testable import BeaconHTTP
import Foundation
import Testing
@testable import Beacon
@testable import BeaconLog
import BeaconTestSupport

/// Inputs Tests/Fuzz/FuzzStateFiles found, kept as ordinary tests: `delivery.inflight` and the counter
/// files with bytes Beacon did not write.
@Suite struct StateFileFuzzRegressionTests {
    /// `delivery.inflight` with a send or failure count no run writes (Int.max): loaded as is, the
    /// delivery state machine trapped on its first send (`sends += 1`) or in `failureBudget`
    /// (a multiplication), ending the process at every start. Now the file counts as damaged:
    /// no ranges, the next batch is cut afresh (the documented fallback).
    @Test(arguments: [
        "0 40 9223372036854775807 0\n", "0 40 1 9223372036854775807\n", "0 9223372036854775807 1 0\n", "0 40 2147483648 0\n",
    ])
    func inflightCountsOutOfRange(text: String) throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        try FileManager.default.createDirectory(atPath: dir.path, withIntermediateDirectories: true)
        let file = InflightFile(directory: dir.path, fileSystem: SystemFileSystem())
        try text.write(toFile: file.path, atomically: true, encoding: .utf8)
        #expect(file.load().isEmpty)
        // The largest counts still loaded drive the machine without a trap.
        try "0 40 \(InflightFile.maxCount) \(InflightFile.maxCount)\n".write(toFile: file.path, atomically: true, encoding: .utf8)
        let range = try #require(file.load().first)
        var machine = DeliveryStateMachine(count: range.count, earlierSends: range.sends, earlierFailures: range.failures, isolateAfter: 3)
        for _ in 0..<20 {
            _ = machine.failureBudget
            guard case .send = machine.nextAction() else { continue }
            machine.received(.retry, .init(status: 503))
        }
    }

    /// `reader.counters` holding UInt64.max as the corrupt count: the next corrupt record read
    /// overflowed `skippedCorrupt += 1` and trapped, ending every reader of the log. A count of
    /// 2^62 or more is damage: the file counts as zeros (the README's fallback for a damaged file).
    @Test func countersOutOfRange() throws {
        let dir = temporaryDirectoryPath()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
        var segment = Frame.encode(seq: 0, record: Array(#"{"n":0}"#.utf8))
        segment[segment.count - 3] ^= 1
        segment += Frame.encode(seq: 1, record: Array(#"{"n":1}"#.utf8))
        #expect(FileManager.default.createFile(atPath: dir + "/" + SegmentName.fileName(0), contents: Data(segment)))
        let counters = #"{"skipped_corrupt":18446744073709551615,"skipped_corrupt_by_reason":{"checksum":18446744073709551615}}"#
        try counters.write(toFile: PersistedCounters.path(.reader, directory: dir), atomically: true, encoding: .utf8)
        let log = try BeaconLog(configuration: BeaconLog.Configuration(directory: dir))
        let batch = try log.read()
        #expect(batch.seqs == [1])
        #expect(log.stats.skippedCorrupt == 1)
        try log.close()
    }
}

/// Inputs Tests/Fuzz/FuzzHTTPResponse found in collectors' answers.
@Suite struct HTTPAnswerFuzzRegressionTests {
    /// FuzzHTTPResponse (before the strict digits of c6ad44f): the last chunk's size line `-0`
    /// parsed as 0 (`Int(_:radix:)` takes a sign), so a body ended where a strict reader sees a
    /// malformed answer; each byte as its own piece, as the fuzz target feeds it.
    @Test(arguments: ["-0\t", "+0", "-0", " 0x0"])
    func signedLastChunk(size: String) {
        let answer = Array("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\n2\u{8}\n1\n\r\n\(size)\n\r\n".utf8)
        var parser = HTTPResponseParser()
        var failed = false
        for byte in answer {
            do {
                _ = try [byte].withUnsafeBytes { try parser.consume($0) }
            } catch {
                failed = true
                break
            }
            if parser.isComplete { break }
        }
        #expect(failed, "the chunk size '\(size)' was taken")
    }
}
