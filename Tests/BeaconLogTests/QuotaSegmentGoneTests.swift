import BeaconTestSupport
import FaultInjection
import Foundation
import Synchronization
import Testing
@testable import BeaconLog

/// A writer without the reader lock (`beacon append` beside `beacon send`): its quota looks at
/// the directory once, then drops segment after segment; meanwhile the reader process
/// acknowledges and deletes the oldest ones. On e83cc00 the quota then failed to open a segment
/// that was gone, and the append failed with "open failed: No such file or directory" (found by
/// `InflightStraddleTests`, whose writer appends while a sender acknowledges). The quota now
/// looks at the directory again and goes on.
@Suite struct QuotaSegmentGoneTests {
    @Test("the reader deletes the oldest segment as the quota opens a segment to drop: the append succeeds, and nothing is counted dropped for the deleted one",
          arguments: [0, 1])
    func segmentDeletedDuringTheQuota(opened: Int) throws {
        try withTemporaryDirectory { dir in
            let fs = FaultyFileSystem()
            var config = faultyConfig(dir, fs, durability: .none, segmentBytes: 4096, maxBytes: 16 << 10)
            config.access = .write
            let writer = try BeaconLog(configuration: config)
            defer { try? writer.close() }
            let record = #"{"pad":"\#(String(repeating: "x", count: 200))"}"#
            while try segmentNumbers(dir).count < 4 { try writer.append(record) }
            let numbers = try segmentNumbers(dir)
            let dropped = writer.stats.dropped[.quotaDeleted, default: 0]
            // The quota's first open of an old segment (the next one's first line is read first,
            // then the victim's): the reader process deleted the oldest segment just before.
            let watched = SegmentName.fileName(numbers[opened])
            let deleted = Mutex(false)
            fs.beforeCall = { operation, path in
                if operation == .open && path.hasSuffix(watched) && !deleted.withLock({ $0 }) {
                    deleted.withLock { $0 = true }
                    try? FileManager.default.removeItem(atPath: segmentPath(dir, numbers[0]))
                }
            }
            for _ in 0..<60 { try writer.append(record) }
            try writer.sync()
            #expect(deleted.withLock { $0 }, "the quota opened segment \(numbers[opened])")
            #expect(try !segmentNumbers(dir).contains(numbers[0]))
            let droppedNow = writer.stats.dropped[.quotaDeleted, default: 0]
            #expect(droppedNow >= dropped, "\(droppedNow)")
        }
    }
}
