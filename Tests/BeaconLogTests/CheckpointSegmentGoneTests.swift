import BeaconTestSupport
import FaultInjection
import Foundation
import Testing
@testable import BeaconLog

/// A reader opening beside a writer in another process: the writer's quota deletes the segment
/// the checkpoint is in between the reader's listing of the directory and its opening of that
/// segment. The reader resumes at the next segment (the gap is the quota's), instead of failing
/// to open ("open failed: No such file or directory", `beacon send` exit 74, seen in chaos runs).
@Suite struct CheckpointSegmentGoneTests {
    @Test(arguments: [BeaconLog.Access.read, .readWrite])
    func theCheckpointsSegmentDeletedWhileOpeningIsPassedOver(access: BeaconLog.Access) throws {
        try withTemporaryDirectory { dir in
            do {
                let log = try BeaconLog(configuration: smallConfig(dir))
                for i in 0..<400 { try log.append(#"{"n":\#(i),"pad":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}"#) }
                try log.sync()
                let batch = try log.read(maxRecords: 5)
                try log.acknowledge(through: batch.end)
                try log.close()
            }
            let numbers = try segmentNumbers(dir)
            try #require(numbers.count >= 3)
            let gone = SegmentName.fileName(numbers[0])
            let fs = FaultyFileSystem()
            fs.beforeCall = { operation, path in
                if operation == .open && path.hasSuffix(gone) { try? FileManager.default.removeItem(atPath: dir + "/" + gone) }
            }
            var config = faultyConfig(dir, fs, durability: .none)
            config.access = access
            let log = try BeaconLog(configuration: config)
            defer { try? log.close() }
            #expect(log.stats.checkpointRecovery?.contains("was deleted while the log was opened") == true, "\(String(describing: log.stats.checkpointRecovery))")
            let first = try log.read(maxRecords: 1)
            #expect(first.start.segment == numbers[1])
            #expect((first.firstSeq ?? 0) > 5, "the records of the deleted segment are not read")
        }
    }
}
