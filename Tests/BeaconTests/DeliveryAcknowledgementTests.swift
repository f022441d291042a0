import Foundation
import Synchronization
import Testing
@testable import Beacon
import BeaconLog
import BeaconTesting

/// A batch's acknowledgement (the checkpoint's fdatasync) is made durable while the next request
/// goes out. A crash in between re-sends that batch exactly as it was sent, and every pass still
/// ends with its acknowledgements durable.
@Suite("Delivery: acknowledgements overlapping the next request", .timeLimit(.minutes(1)))
struct DeliveryAcknowledgementTests {
    @Test("a crash while a batch's acknowledgement is made durable re-sends it, then the next, with the same keys")
    func crashDuringAcknowledgement() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<20)
        let transport = InMemoryTransport()
        // delivery.inflight as a crash during the second request would leave it.
        let inflightDuringSecond = Mutex<String?>(nil)
        let inflightPath = dir.path + "/" + InflightFile.fileName
        transport.setHandler { request in
            if trackIDs(in: request).first == 10 {
                inflightDuringSecond.withLock { $0 = try? String(contentsOfFile: inflightPath, encoding: .utf8) }
            }
            return nil
        }
        let uploader = Uploader(log: log, configuration: testDelivery(batch: 10), transport: transport, clock: ManualClock(), diagnostics: { _ in })
        let result = await uploader.flush()
        #expect(result.outcome.isComplete && result.sent == 20)
        #expect(log.checkpoint.seq == 20, "the pass ends with its last acknowledgement durable")
        let sent = transport.requests
        #expect(sent.map { trackIDs(in: $0) } == [Array(0..<10), Array(10..<20)])
        let saved = try #require(inflightDuringSecond.withLock { $0 })

        // The restart: the first batch's checkpoint never reached the disk, more events came since,
        // and the batch size changed, so only delivery.inflight can cut the same two requests.
        let restarted = DeliveryTempDir()
        defer { restarted.remove() }
        let again = try deliveryLog(restarted, events: 0..<27)
        try saved.write(toFile: restarted.path + "/" + InflightFile.fileName, atomically: true, encoding: .utf8)
        let transport2 = InMemoryTransport()
        let uploader2 = Uploader(log: again, configuration: testDelivery(batch: 7), transport: transport2, clock: ManualClock(), diagnostics: { _ in })
        let result2 = await uploader2.flush()
        #expect(result2.outcome.isComplete && result2.sent == 27)
        let resent = transport2.requests
        #expect(resent.map { trackIDs(in: $0) } == [Array(0..<10), Array(10..<20), Array(20..<27)])
        #expect(resent.prefix(2).map { $0.header("Idempotency-Key") } == sent.map { $0.header("Idempotency-Key") })
        #expect(resent.prefix(2).map { $0.header("X-Beacon-Retry") } == ["1", "1"])
    }

    @Test("delivery.inflight: every number of ranges and a file of an earlier version read back")
    func inflightFileRoundTrip() throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        try FileManager.default.createDirectory(atPath: dir.path, withIntermediateDirectories: true)
        let file = InflightFile(directory: dir.path, fileSystem: SystemFileSystem())
        #expect(file.load().isEmpty)
        let big = InflightFile.Range(firstSeq: .max, count: .max, sends: .max)
        for ranges in [[], [InflightFile.Range(firstSeq: 7, count: 3, sends: 2)], [.init(firstSeq: 0, count: 50), big], [big]] {
            try file.save(ranges)
            #expect(file.load() == ranges)
            let size = try FileManager.default.attributesOfItem(atPath: file.path)[.size] as? Int
            #expect(size == InflightFile.recordSize, "rewritten in place at a fixed size")
        }
        // An earlier version wrote one range per file, with or without the send count.
        for (text, expected) in [("12 50 3\n", [InflightFile.Range(firstSeq: 12, count: 50, sends: 3)]), ("12 50\n", [.init(firstSeq: 12, count: 50)]), ("garbage\n", [])] {
            let other = InflightFile(directory: dir.path, fileSystem: SystemFileSystem())
            try text.write(toFile: other.path, atomically: true, encoding: .utf8)
            #expect(other.load() == expected)
        }
    }
}
