import Beacon
import BeaconLog
import BeaconTesting
import BeaconTestSupport
import FaultInjection
import Foundation
import Testing
import BeaconTestTraits
@testable import BeaconCLI

/// Issue 28: `beacon send --metrics` answers a scrape while the disk stalls. The uploader's pass
/// waits in the acknowledgement's fsync on its own thread, holding the actor; the endpoint takes
/// the snapshot without it. The stall is held until the scrape is done: only a hang fails it (the
/// scrape's socket gives up after 10 s).
@Suite("beacon send --metrics during a disk stall", .blocking)
struct MetricsEndpointStallTests {
    @Test("GET /metrics answers while the uploader's acknowledgement waits in a stalled fsync")
    func answersDuringStall() async throws {
        let dir = temporaryDirectoryPath()
        let stall = StallSwitch(dir + ".stall")
        defer { stall.release(); try? FileManager.default.removeItem(atPath: dir) }
        let writer = try BeaconLog(directory: dir)
        // Fewer than a batch: the acknowledgement is made on the pass's own thread, not overlapped
        // with a next request (a full batch says more may wait), so the pass waits in it.
        for i in 0..<5 { try writer.append(Array(#"{"event":"Tick","time":\#(1_700_000_000_000 + i)}"#.utf8)) }
        try writer.close()
        // As `beacon send` opens it: a reader beside a possible writer in another process.
        var config = BeaconLog.Configuration(directory: dir)
        config.access = .read
        config.fileSystem = stall.fileSystem(over: StallingFileSystem(base: SystemFileSystem(), controlFile: stall.path))
        let log = try BeaconLog(configuration: config)
        var delivery = DeliveryConfiguration(url: URL(string: "http://127.0.0.1:9/events")!)
        delivery.batchSize = 10
        delivery.flushInterval = nil
        let uploader = try Uploader(log: log, configuration: delivery, transport: InMemoryTransport(), clock: ManualClock())
        let server = try MetricsEndpoint.start("127.0.0.1:0", uploader: uploader)
        defer { server.stop() }
        stall.hold()
        let flush = Task { await uploader.flush() }
        #expect(eventually(within: 60) { stall.stalledSyncs > 0 }, "the flush reached an fsync or fdatasync while the disk stalled")
        let started = ContinuousClock.now
        let answer = try httpGet(server.port, "/metrics")
        let took = ContinuousClock.now - started
        #expect(answer.status == 200 && answer.body.contains("\nbeacon_pending_records 5\n"),
                "GET /metrics during the stall, after \(took): \(answer.status) \(answer.body.prefix(300))")
        #expect(answer.body.contains(#"beacon_answers_total{class="2xx"} 1"#), "\(answer.body.prefix(2000))")
        stall.release()
        let result = await flush.value
        #expect(result.sent == 5, "\(result)")
        try log.close()
    }
}
