import FaultInjection
import Foundation
import Glibc
import Testing
@testable import BeaconLog

/// Every ``RefusalReason`` walked from the refusal to where a user reads it: the error `append`
/// throws, `stats.refused` under that reason, and the same count read back after a reopen (from
/// `writer.counters`). A reason added without a scenario fails the test.
@Suite("Refusal reasons: thrown, counted, kept across a reopen")
struct RefusalReasonWalkTests {
    /// Appends until the log refuses; returns the code of the refusal.
    static func refuse(_ reason: RefusalReason, _ dir: String) throws -> BeaconLogError.Code? {
        var config = BeaconLog.Configuration(directory: dir)
        let fs = FaultyFileSystem()
        config.fileSystem = fs
        config.segmentBytes = 4096
        let pad = String(repeating: "x", count: 1000)
        if reason == .quotaExceeded { config.maxBytes = 8192; config.quotaPolicy = .rejectNew }
        if reason == .recordTooLarge { config.maxRecordBytes = 16 }
        let log = try BeaconLog(configuration: config)
        defer { fs.clearFaults(); try? log.close() }
        if reason == .diskFull { fs.inject(.write, errno: ENOSPC) }
        let record = reason == .invalidRecord ? "" : #"{"pad":"\#(pad)"}"#
        for _ in 0..<3000 {
            do { try log.append(record) } catch let error as BeaconLogError {
                if error.keptSeqs != nil { continue }   // appended, kept in memory: not refused
                #expect(log.stats.refused == [reason: 1])
                return error.code
            }
        }
        return nil
    }

    @Test(arguments: RefusalReason.allCases)
    func walk(reason: RefusalReason) throws {
        try withTemporaryDirectory { dir in
            let code = try Self.refuse(reason, dir)
            let expected: [RefusalReason: BeaconLogError.Code] = [
                .invalidRecord: .invalidRecord, .recordTooLarge: .recordTooLarge, .quotaExceeded: .quotaExceeded, .diskFull: .diskFull,
            ]
            let want = try #require(expected[reason], "no scenario refuses a record for \(reason): add one")
            #expect(code == want)
            var config = BeaconLog.Configuration(directory: dir)
            config.access = .readOnly
            let reopened = try BeaconLog(configuration: config)
            #expect(reopened.stats.refused == [reason: 1])
            try reopened.close()
        }
    }

    @Test func namesAreStableAndReadBack() {
        for reason in RefusalReason.allCases {
            #expect(RefusalReason(name: reason.name) == reason && "\(reason)" == reason.name)
        }
        #expect(Set(RefusalReason.allCases.map(\.explanation)).count == RefusalReason.allCases.count)
        // The names earlier versions saved in `writer.counters`.
        #expect(RefusalReason(name: "invalid") == .invalidRecord && RefusalReason(name: "tooLarge") == .recordTooLarge)
        #expect(RefusalReason(name: "quota") == .quotaExceeded && DropReason(name: "quota") == .quotaDeleted)
        for reason in CorruptionReason.allCases { #expect(CorruptionReason(name: reason.name) == reason) }
    }
}
