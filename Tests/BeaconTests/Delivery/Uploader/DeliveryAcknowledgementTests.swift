import Foundation
import Synchronization
import Testing
@testable import Beacon
import BeaconLog
import BeaconTesting
import BeaconTestSupport
import FaultInjection

/// A batch's acknowledgement (the checkpoint's fdatasync) is made durable while the next request
/// goes out. A crash in between re-sends that batch exactly as it was sent, and every pass still
/// ends with its acknowledgements durable.
@Suite("Delivery: acknowledgements overlapping the next request", .timeLimit(.minutes(1)))
struct DeliveryAcknowledgementTests {
    @Test("a crash while a batch's acknowledgement is made durable: a kill -9 sends only the request in flight again; after a reboot the batch accepted is sent again too, with the same keys", arguments: [false, true])
    func crashDuringAcknowledgement(reboot: Bool) async throws {
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
        let uploader = try Uploader(log: log, configuration: testDelivery(batch: 10), transport: transport, clock: ManualClock(), diagnostics: { _ in })
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
        #expect(saved.contains(InflightFile.currentBootID), "the first batch is marked accepted: \(saved.prefix(120))")
        if reboot { try simulateReboot(restarted.path) }
        let transport2 = InMemoryTransport()
        let uploader2 = try Uploader(log: again, configuration: testDelivery(batch: 7), transport: transport2, clock: ManualClock(), diagnostics: { _ in })
        let result2 = await uploader2.flush()
        let resent = transport2.requests
        #expect(again.checkpoint.seq == 27)
        if reboot {
            #expect(result2.outcome.isComplete && result2.sent == 27)
            #expect(resent.map { trackIDs(in: $0) } == [Array(0..<10), Array(10..<20), Array(20..<27)])
            #expect(resent.prefix(2).map { $0.headers["Idempotency-Key"] } == sent.map { $0.headers["Idempotency-Key"] })
            #expect(resent.prefix(2).map { $0.headers["X-Beacon-Retry"] } == ["1", "1"])
        } else {
            #expect(result2.outcome.isComplete && result2.sent == 17)
            #expect(resent.map { trackIDs(in: $0) } == [Array(10..<20), Array(20..<27)])
            #expect(resent.first?.headers["Idempotency-Key"] == sent.last?.headers["Idempotency-Key"])
            #expect(resent.first?.headers["X-Beacon-Retry"] == "1")
        }
    }

    @Test("a crash during any request of a backlog: after a kill -9 the restart re-sends only the request in flight, after a reboot every batch since the durable checkpoint, as they were sent; then the rest", arguments: 0..<8, [false, true])
    func crashDuringAnyRequest(crashAt: Int, reboot: Bool) async throws {
        let dir = DeliveryTempDir(), crashed = DeliveryTempDir()
        defer { dir.remove(); crashed.remove() }
        let log = try deliveryLog(dir, events: 0..<80)
        let transport = InMemoryTransport()
        // The directory as a kill -9 during request `crashAt` leaves it (the page cache survives).
        transport.setHandler { request in
            if trackIDs(in: request).first == 10 * crashAt { try? FileManager.default.copyItem(atPath: dir.path, toPath: crashed.path) }
            return nil
        }
        let uploader = try Uploader(log: log, configuration: testDelivery(batch: 10), transport: transport, clock: ManualClock(), diagnostics: { _ in })
        let result = await uploader.flush()
        #expect(result.outcome.isComplete && result.sent == 80)
        #expect(log.checkpoint.seq == 80, "the pass ends with every acknowledgement durable")
        let keys = transport.requests.map { $0.headers["Idempotency-Key"] }

        // The restart cuts batches of 7: only delivery.inflight can make it send the same requests.
        if reboot { try simulateReboot(crashed.path) }
        let again = try BeaconLog(directory: crashed.path)
        let durable = Int(again.checkpoint.seq)
        #expect(durable % 10 == 0 && durable <= 10 * crashAt)
        #expect(crashAt - durable / 10 <= Uploader.maxOutstandingAcknowledgements, "at most the outstanding acknowledgements are not durable")
        let transport2 = InMemoryTransport()
        let uploader2 = try Uploader(log: again, configuration: testDelivery(batch: 7), transport: transport2, clock: ManualClock(), diagnostics: { _ in })
        let result2 = await uploader2.flush()
        let resent = transport2.requests
        // A kill -9 keeps the page cache: the batches accepted are acknowledged, not sent again.
        let from = reboot ? durable : 10 * crashAt
        #expect(result2.outcome.isComplete && result2.sent == 80 - from)
        let repeated = crashAt + 1 - from / 10
        #expect(resent.prefix(repeated).map { trackIDs(in: $0) } == (from / 10...crashAt).map { Array(10 * $0..<10 * $0 + 10) })
        #expect(resent.prefix(repeated).map { $0.headers["Idempotency-Key"] } == Array(keys[(from / 10)...crashAt]))
        #expect(resent.prefix(repeated).allSatisfy { $0.headers["X-Beacon-Retry"] == "1" })
        #expect(resent.flatMap { trackIDs(in: $0) } == Array(from..<80), "then the rest, in order, once")
        #expect(again.checkpoint.seq == 80)
    }

    @Test("two crashes in a row, each with a reboot: ranges an earlier run sent that the restart has not reached yet stay in delivery.inflight, so the third run cuts them as they were sent")
    func crashBeforeReachingEarlierRanges() async throws {
        let first = DeliveryTempDir(), second = DeliveryTempDir(), third = DeliveryTempDir()
        defer { first.remove(); second.remove(); third.remove() }
        // Run 1: 27 events in batches of 10; killed during the third request, a tail of 7.
        let log = try deliveryLog(first, events: 0..<27)
        let transport = InMemoryTransport()
        transport.setHandler { request in
            if trackIDs(in: request).first == 20 { try? FileManager.default.copyItem(atPath: first.path, toPath: second.path); try? simulateReboot(second.path) }
            return nil
        }
        _ = try await Uploader(log: log, configuration: testDelivery(batch: 10), transport: transport, clock: ManualClock(), diagnostics: { _ in }).flush()
        let sent = transport.requests
        #expect(sent.map { trackIDs(in: $0) } == [Array(0..<10), Array(10..<20), Array(20..<27)])

        // Run 2: more events came; killed during its second request, before it reached the tail.
        let log2 = try BeaconLog(directory: second.path)
        #expect(log2.checkpoint.seq == 0, "no acknowledgement of run 1 was durable yet")
        for i in 27..<60 { try log2.append(deliveryEvent(i)) }
        try log2.sync()
        let transport2 = InMemoryTransport()
        transport2.setHandler { request in
            if trackIDs(in: request).first == 10 { try? FileManager.default.copyItem(atPath: second.path, toPath: third.path); try? simulateReboot(third.path) }
            return nil
        }
        _ = try await Uploader(log: log2, configuration: testDelivery(batch: 10), transport: transport2, clock: ManualClock(), diagnostics: { _ in }).flush()

        // Run 3: the tail run 1 sent goes again as it was sent, with its key.
        let log3 = try BeaconLog(directory: third.path)
        let transport3 = InMemoryTransport()
        let result = try await Uploader(log: log3, configuration: testDelivery(batch: 10), transport: transport3, clock: ManualClock(), diagnostics: { _ in }).flush()
        #expect(result.outcome.isComplete)
        let resent = transport3.requests
        try #require(resent.count >= 3)
        #expect(resent.prefix(3).map { trackIDs(in: $0) } == sent.map { trackIDs(in: $0) })
        #expect(resent.prefix(3).map { $0.headers["Idempotency-Key"] } == sent.map { $0.headers["Idempotency-Key"] })
        #expect(log3.checkpoint.seq == 60)
        #expect(resent.flatMap { trackIDs(in: $0) } == Array(0..<60), "from run 1's checkpoint, in order, once")
    }

    @Test("a checkpoint write that fails while acknowledgements overlap: the flush says so, the next one delivers the rest, nothing is lost", arguments: [EIO, ENOSPC])
    func failedGroupWrite(errno code: Int32) async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let fs = FaultyFileSystem()
        // Each acknowledgement durable at once, so that its fdatasync fails inside the flush.
        let log = try faultyLog(dir, fs, events: 0..<160, checkpointSyncInterval: nil)
        // The second checkpoint write fails (the first one makes the file).
        fs.inject(.syncData, errno: code, path: "checkpoint", onCall: 2)
        let transport = InMemoryTransport()
        let uploader = try Uploader(log: log, configuration: testDelivery(batch: 5), transport: transport, clock: ManualClock(), diagnostics: { _ in })
        let first = await uploader.flush()
        #expect(!first.outcome.isComplete, "\(first)")
        fs.clearFaults()
        var flushes = 1
        while log.stats.pendingRecords > 0 && flushes < 10 {
            _ = await uploader.flush()
            flushes += 1
        }
        #expect(log.checkpoint.seq == 160, "everything acknowledged after \(flushes) flushes")
        let delivered = transport.requests.flatMap { trackIDs(in: $0) }
        #expect(Set(delivered) == Set(0..<160), "nothing lost")
        // At least once: what is sent again is whole batches, and the last send of each event is in order.
        var lastSend: [Int: Int] = [:]
        for (i, id) in delivered.enumerated() { lastSend[id] = i }
        #expect((0..<160).map { lastSend[$0]! } == (0..<160).map { lastSend[$0]! }.sorted())
    }

    @Test("a backlog's checkpoint is made durable once per group of batches, not once per request")
    func checkpointWritesPerGroup() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let fs = FaultyFileSystem()
        let log = try faultyLog(dir, fs, events: 0..<160)
        fs.resetJournal()
        let transport = InMemoryTransport()
        let uploader = try Uploader(log: log, configuration: testDelivery(batch: 5), transport: transport, clock: ManualClock(), diagnostics: { _ in })
        let result = await uploader.flush()
        #expect(result.outcome.isComplete && result.sent == 160 && transport.requests.count == 32)
        #expect(log.checkpoint.seq == 160)
        let syncs = checkpointSyncs(fs)
        // 32 batches: one write per group of four while the backlog lasts, and the last ones.
        #expect(syncs.count <= 32 / Uploader.acknowledgementGroup + 2, "\(syncs.count) checkpoint fsyncs")
    }

    @Test("a checkpoint fdatasync that takes long holds back neither reads nor requests: the batches delivered meanwhile (up to 64) are made durable together by the next write")
    func slowCheckpointWriteDoesNotStallDelivery() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let fs = FaultyFileSystem()
        let log = try faultyLog(dir, fs, events: 0..<400)
        fs.resetJournal()
        let transport = InMemoryTransport()
        // The first checkpoint fsync waits (at most 40 s) until 30 more requests went out, or as
        // many as the batches allowed outstanding (a loaded machine may start the write late).
        let blocked = Mutex(false), sentMeanwhile = Mutex(false)
        fs.beforeCall = { operation, path in
            guard operation == .syncData || operation == .sync, path.contains("/checkpoint"), !blocked.withLock({ let was = $0; $0 = true; return was }) else { return }
            let before = transport.requests.count
            let wanted = min(before + 30, Uploader.maxOutstandingBatches)
            let until = ContinuousClock.now + .seconds(40)
            while transport.requests.count < wanted && ContinuousClock.now < until { usleep(1000) }
            sentMeanwhile.withLock { $0 = transport.requests.count >= wanted }
        }
        let uploader = try Uploader(log: log, configuration: testDelivery(batch: 2), transport: transport, clock: ManualClock(), diagnostics: { _ in })
        let result = await uploader.flush()
        fs.beforeCall = nil
        #expect(result.outcome.isComplete && result.sent == 400 && transport.requests.count == 200)
        #expect(log.checkpoint.seq == 400)
        #expect(sentMeanwhile.withLock { $0 }, "30 requests (or up to the batches allowed outstanding) went out while a checkpoint fsync ran")
        #expect(transport.requests.flatMap { trackIDs(in: $0) } == Array(0..<400))
    }

    @Test("a sidecar (another process writes) groups its acknowledgements too, for events appended after it opened the log")
    func sidecarGroupsAcknowledgements() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        var writing = BeaconLog.Configuration(directory: dir.path)
        writing.access = .write
        let writer = try BeaconLog(configuration: writing)
        let fs = FaultyFileSystem()
        var config = BeaconLog.Configuration(directory: dir.path)
        config.access = .read
        config.fileSystem = fs
        let reader = try BeaconLog(configuration: config)
        // Appended after the reader opened: its count of pending events does not include them.
        for i in 0..<160 { try writer.append(deliveryEvent(i)) }
        try writer.sync()
        let transport = InMemoryTransport()
        let uploader = try Uploader(log: reader, configuration: testDelivery(batch: 5), transport: transport, clock: ManualClock(), diagnostics: { _ in })
        let result = await uploader.flush()
        #expect(result.outcome.isComplete && result.sent == 160)
        #expect(transport.requests.flatMap { trackIDs(in: $0) } == Array(0..<160))
        let syncs = checkpointSyncs(fs)
        #expect(syncs.count <= 32 / Uploader.acknowledgementGroup + 2, "\(syncs.count) checkpoint fsyncs for 32 batches")
    }

    @Test("delivery.inflight: random ranges, adjacent or not, with equal or other counts, read back; its lines are lineCount's", arguments: 0..<8)
    func inflightFileRandomRanges(seed: UInt64) throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        try FileManager.default.createDirectory(atPath: dir.path, withIntermediateDirectories: true)
        let file = InflightFile(directory: dir.path, fileSystem: SystemFileSystem())
        var random = SplitMix(seed: seed)
        for _ in 0..<200 {
            var ranges: [InflightFile.Range] = []
            var next = UInt64.random(in: 0...1_000_000, using: &random)
            for _ in 0..<Int.random(in: 0...40, using: &random) {
                if Int.random(in: 0..<4, using: &random) == 0 { next += UInt64.random(in: 1...9, using: &random) }
                let count = Int.random(in: 1...600, using: &random)
                ranges.append(.init(firstSeq: next, count: count, sends: Int.random(in: 1...2, using: &random), failures: Int.random(in: 0...1, using: &random), accepted: Bool.random(using: &random)))
                next += UInt64(count)
            }
            while InflightFile.lineCount(ranges) > InflightFile.capacity { ranges.removeLast() }
            try file.save(ranges)
            #expect(file.load() == ranges)
            let text = try String(contentsOfFile: file.path, encoding: .utf8)
            #expect(text.split(separator: "\n").filter { !$0.allSatisfy { $0 == " " } }.count == InflightFile.lineCount(ranges))
        }
    }

    @Test("delivery.inflight: every number of ranges and a file of an earlier version read back")
    func inflightFileRoundTrip() throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        try FileManager.default.createDirectory(atPath: dir.path, withIntermediateDirectories: true)
        let file = InflightFile(directory: dir.path, fileSystem: SystemFileSystem())
        #expect(file.load().isEmpty)
        let big = InflightFile.Range(firstSeq: .max, count: InflightFile.maxCount, sends: InflightFile.maxCount, failures: InflightFile.maxCount)
        for ranges in [[], [InflightFile.Range(firstSeq: 7, count: 3, sends: 2)], [.init(firstSeq: 0, count: 50), big], [big]] {
            try file.save(ranges)
            #expect(file.load() == ranges)
            let size = try FileManager.default.attributesOfItem(atPath: file.path)[.size] as? Int
            #expect(size == InflightFile.recordSize, "rewritten in place at a fixed size")
        }
        // Accepted ranges carry the boot id: trusted in this boot only.
        let accepted = [InflightFile.Range(firstSeq: 0, count: 10, accepted: true), .init(firstSeq: 10, count: 10, sends: 2, failures: 1)]
        try file.save(accepted)
        #expect(file.load() == accepted)
        #expect(InflightFile(directory: dir.path, fileSystem: SystemFileSystem(), bootID: String(repeating: "1", count: 32)).load()
            == [.init(firstSeq: 0, count: 10), .init(firstSeq: 10, count: 10, sends: 2, failures: 1)], "another boot sends them again")
        let full = (0..<InflightFile.capacity).map { InflightFile.Range(firstSeq: .max - UInt64($0), count: InflightFile.maxCount, sends: InflightFile.maxCount, failures: InflightFile.maxCount, accepted: true) }
        try file.save(full)
        #expect(file.load() == full, "the most ranges, every field at its widest that loads, fit the record")
        // Ranges that follow each other with the same counts share a line, and load back apart;
        // the most batches outstanding fit beside the other lines at their widest.
        let joined = [InflightFile.Range(firstSeq: 0, count: 10, accepted: true), .init(firstSeq: 10, count: 10, accepted: true), .init(firstSeq: 20, count: 5, accepted: true), .init(firstSeq: 25, count: 10, sends: 2), .init(firstSeq: 35, count: 10, sends: 2)]
        try file.save(joined)
        #expect(file.load() == joined)
        let text = try String(contentsOfFile: file.path, encoding: .utf8)
        #expect(text.hasPrefix("0 10,10,5 1 0 \(InflightFile.currentBootID)\n25 10,10 2 0\n"), "\(text.prefix(100))")
        let outstanding = (0..<Uploader.maxOutstandingBatches).map { InflightFile.Range(firstSeq: UInt64($0) * UInt64(InflightFile.maxCount), count: InflightFile.maxCount, sends: InflightFile.maxCount, failures: InflightFile.maxCount, accepted: true) }
        let most = outstanding + full.prefix(InflightFile.capacity - 1)
        try file.save(most)
        #expect(file.load() == most, "\(Uploader.maxOutstandingBatches) joined ranges and \(InflightFile.capacity - 1) lines fit the record")
        // Wider counts still fit the record, and load as a damaged file (no ranges).
        try file.save(full.map { InflightFile.Range(firstSeq: $0.firstSeq, count: .max, sends: .max, failures: .max, accepted: true) })
        #expect(file.load().isEmpty)
        // An earlier version wrote one range per file, with or without the send count.
        for (text, expected) in [("12 50 3\n", [InflightFile.Range(firstSeq: 12, count: 50, sends: 3)]), ("12 50\n", [.init(firstSeq: 12, count: 50)]), ("garbage\n", [])] {
            let other = InflightFile(directory: dir.path, fileSystem: SystemFileSystem())
            try text.write(toFile: other.path, atomically: true, encoding: .utf8)
            #expect(other.load() == expected)
        }
    }
}

/// `delivery.inflight` in `directory` as a reboot leaves it: written under another boot id.
func simulateReboot(_ directory: String) throws {
    let path = directory + "/" + InflightFile.fileName
    guard FileManager.default.fileExists(atPath: path) else { return }
    let text = try String(contentsOfFile: path, encoding: .utf8)
    try text.replacingOccurrences(of: InflightFile.currentBootID, with: String(repeating: "0", count: 32)).write(toFile: path, atomically: false, encoding: .utf8)
}

/// A log in `dir` on `fs` holding events `range`, durable.
private func faultyLog(_ dir: DeliveryTempDir, _ fs: FaultyFileSystem, events range: Range<Int>, checkpointSyncInterval: Duration? = .seconds(1)) throws -> BeaconLog {
    var config = BeaconLog.Configuration(directory: dir.path)
    config.fileSystem = fs
    config.checkpointSyncInterval = checkpointSyncInterval
    let log = try BeaconLog(configuration: config)
    for i in range { try log.append(deliveryEvent(i)) }
    try log.sync()
    return log
}

/// The fsyncs of the checkpoint file `fs` has seen.
private func checkpointSyncs(_ fs: FaultyFileSystem) -> [FaultyFileSystem.Call] {
    fs.journal.filter { ($0.operation == .syncData || $0.operation == .sync) && $0.path.hasSuffix("/checkpoint") }
}
