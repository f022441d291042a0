import Foundation
import Glibc
import Synchronization
import Testing
@_spi(Testing) @testable import Beacon
import BeaconLog
import BeaconTesting
import FaultInjection
import BeaconTestSupport

/// Issue 28: the snapshot an operator scrapes answers while the disk stalls. The uploader's pass
/// waits in the checkpoint's fdatasync (on its own thread, holding the actor: one batch, the last,
/// is acknowledged before the pass goes on); the snapshot must not wait for it. Each test holds
/// the stall until its check is done: only a hang fails it.
@Suite("Metrics during a disk stall: the snapshot never waits for the uploader or the disk", .timeLimit(.minutes(3)))
struct MetricsDuringStallTests {
    @Test("an uploader's metrics and stats answer while its acknowledgement waits in a stalled fdatasync")
    func uploaderAnswers() async throws {
        let dir = DeliveryTempDir()
        let stall = StallSwitch(dir.path + ".stall")
        defer { stall.release(); dir.remove() }
        try deliveryLog(dir, events: 0..<10).close()
        var config = BeaconLog.Configuration(directory: dir.path)
        config.fileSystem = stall.fileSystem(over: StallingFileSystem(base: SystemFileSystem(), controlFile: stall.path))
        let log = try BeaconLog(configuration: config)
        let uploader = try Uploader(log: log, configuration: testDelivery(batch: 10), transport: InMemoryTransport(), clock: ManualClock())
        stall.hold()
        let flush = Task { await uploader.flush() }
        #expect(await eventually(60) { stall.stalledSyncs > 0 }, "the flush reached an fsync or fdatasync while the disk stalled")
        let metrics = await answered(within: .seconds(30)) { uploader.metrics }
        let stats = await answered(within: .seconds(30)) { uploader.stats }
        #expect(metrics != nil, "Uploader.metrics did not answer within 30 s while the disk stalled")
        #expect(stats != nil, "Uploader.stats did not answer within 30 s while the disk stalled")
        // The batch went out, and its acknowledgement is what waits: still 10 on disk.
        #expect(metrics?.pendingRecords == 10 && metrics?.answers == [.success: 1], "\(String(describing: metrics))")
        #expect(stats?.failedRequests == 0)
        stall.release()
        let result = await flush.value
        #expect(result.sent == 10 && log.stats.pendingRecords == 0, "\(result)")
        try log.close()
    }

    @Test("a tracker's metrics answer while the disk stalls (stallFsync): the uploader and the writer both wait in fsync")
    func trackerAnswers() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("beacon-stall-metrics-\(UUID().uuidString)").path
        let stall = StallSwitch(dir + ".stall")
        defer { stall.release(); try? FileManager.default.removeItem(atPath: dir) }
        var config = Beacon.Configuration.testing(dir)
        var delivery = testDelivery(batch: 10)
        delivery.flushBulkSize = 1_000_000
        config.delivery = delivery
        config.transport = InMemoryTransport()
        config.stallFsync(whileFileExists: stall.path)
        config.storage.fileSystem = stall.fileSystem(over: config.storage.fileSystem)
        // Every acknowledgement made durable before it is published, so that the flush's waits
        // in the stalled fdatasync with its ten events still pending. With the default (the
        // checkpoint synced at most once a second) it waited only while its events still needed
        // a sync: after a delay (a loaded run; 300 ms added before the stall does it every time)
        // the checkpoint was published at once, and the snapshot counted 0 pending.
        config.storage.checkpointSyncInterval = nil
        let beacon = try Beacon(configuration: config)
        // The delivery loop's first pass, due at the writer's first commit, delivers what is
        // committed then; on a loaded machine it could take the ten events below and leave the
        // flush nothing to acknowledge (no fsync to stall). Let it deliver one event first: with
        // no interval and a bulk size out of reach, nothing runs in the background once that pass ended.
        beacon.track("Warmup")
        try await offPool { try beacon.sync() }
        let uploader = try #require(beacon.delivery.uploader)
        #expect(await eventually(60) {
            beacon.deliveryStats.sentEvents == 1
                && uploader.scheduling.withLock { $0.machine.loop.id != 0 && $0.machine.state == .idle && !$0.machine.trigger.due }
        }, "the first pass ended")
        for i in 0..<10 { beacon.track("Tick", properties: ["i": .int(i)]) }
        try await offPool { try beacon.sync() }
        stall.hold()
        let flush = Task { await beacon.flush() }
        #expect(await eventually(60) { stall.stalledSyncs > 0 }, "the flush reached an fsync or fdatasync while the disk stalled")
        // The writer's next commit stalls too.
        beacon.track("During")
        let metrics = await answered(within: .seconds(30)) { await beacon.metrics }
        #expect(metrics != nil, "Beacon.metrics did not answer within 30 s while the disk stalled")
        #expect(metrics?.answers == [.success: 2] && (metrics?.pendingRecords ?? 0) >= 10, "\(String(describing: metrics))")
        stall.release()
        _ = await flush.value
        await beacon.close()
    }
}

/// `body`'s value if it answers within `limit`, else nil; a `body` that hangs goes on in its own
/// task (until the stall that holds it is released).
func answered<T: Sendable>(within limit: Duration, _ body: @escaping @Sendable () async -> T) async -> T? {
    let slot = AnswerSlot<T>()
    Task.detached {
        let answer = await body()
        slot.value.withLock { $0 = answer }
    }
    _ = await eventually(Double(limit.components.seconds)) { slot.value.withLock { $0 != nil } }
    return slot.value.withLock { $0 }
}

/// Where ``answered(within:_:)``'s task leaves the answer.
final class AnswerSlot<T: Sendable>: Sendable {
    let value = Mutex<T?>(nil)
}
