import Foundation
import Testing
@testable import Beacon
import BeaconLog
import BeaconTesting

/// Issue 28: one typed snapshot (``BeaconMetrics``) from an uploader and a tracker, and its
/// Prometheus / OpenMetrics rendering.
@Suite("Metrics: the snapshot and its exposition", .timeLimit(.minutes(1)))
struct MetricsSnapshotTests {
    @Test("an uploader's snapshot: answers by class, durations, sent, lag from the time field, last success")
    func uploaderSnapshot() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<12)
        let transport = InMemoryTransport(replies: [.status(503), .failure(TransportError(.timeout, "no answer")), .status(200), .status(200)])
        let now = Date(timeIntervalSince1970: 1_700_000_100)  // 100 s after event 0's time
        let uploader = try Uploader(log: log, configuration: testDelivery(batch: 6), transport: transport, clock: ManualClock(), now: { now })
        let before = uploader.metrics
        #expect(before.pendingRecords == 12 && before.oldestPending == .init(age: .seconds(100), source: .eventTime, seq: 0))
        _ = await uploader.flush()
        _ = await uploader.flush()
        let during = uploader.metrics
        #expect(during.deliveryPaused)
        _ = await uploader.flush()
        let m = uploader.metrics
        #expect(m.answers == [.serverError: 1, .timeout: 1, .success: 2])
        #expect(m.requestDuration.count == 4 && m.requestDuration.counts.reduce(0, +) == 4)
        #expect(m.sentEvents == 12 && m.sentRequests == 2 && m.pendingRecords == 0 && m.oldestPending == nil)
        #expect(m.retries >= 1 && !m.deliveryPaused && m.requestsInFlight == 0 && m.eventsInFlight == 0)
        #expect(m.lastSuccess == now)
        #expect(m.writerCommitDuration == nil)
    }

    @Test("the age of a record without a time field comes from its segment's creation")
    func ageWithoutTime() throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try BeaconLog(directory: dir.path)
        try log.append(Array(#"{"a":1}"#.utf8))
        try log.sync()
        let now = Int64(Date().timeIntervalSince1970 * 1000)
        guard let age = BeaconMetrics.PendingAge.of(log, nowMillis: now + 5000) else {
            print("SKIPPED: this file system records no birth time")
            return
        }
        #expect(age.source == .appended && age.seq == 0)
        #expect(age.age >= .seconds(5) && age.age < .seconds(60))
    }

    @Test("the oldest pending record is found past the checkpoint, across segments, one read each")
    func oldestAcrossSegments() throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        var config = BeaconLog.Configuration(directory: dir.path)
        config.segmentBytes = 4096
        let log = try BeaconLog(configuration: config)
        for i in 0..<100 { try log.append(deliveryEvent(i)) }
        try log.sync()
        // Every acknowledgement point, the segment boundaries included: the head is the next seq.
        for through in stride(from: 0, to: 99, by: 7) {
            let batch = try log.read(maxRecords: 7)
            try log.acknowledge(through: batch.end)
            #expect(log.oldestPendingRecord()?.seq == (through + 7 < 100 ? UInt64(through + 7) : nil))
        }
    }

    @Test("a reader beside a writer (beacon send --follow): the disk use follows the writer's appends and the quota's deletions, after every step")
    func diskBytesFollowTheWriter() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        // 4 KiB segments and a 16 KiB quota: the writer's quota deletes the oldest segments while
        // the reader (which never reads here, the collector being down) only looks.
        var writerConfig = BeaconLog.Configuration(directory: dir.path)
        writerConfig.access = .write
        writerConfig.durability = .none
        writerConfig.segmentBytes = 4096
        writerConfig.maxBytes = 16 << 10
        let writer = try BeaconLog(configuration: writerConfig)
        defer { try? writer.close() }
        var readerConfig = BeaconLog.Configuration(directory: dir.path)
        readerConfig.access = .read
        readerConfig.segmentBytes = 4096
        let reader = try BeaconLog(configuration: readerConfig)
        defer { try? reader.close() }
        let uploader = try Uploader(log: reader, configuration: testDelivery(batch: 6), transport: InMemoryTransport(), clock: ManualClock(), now: { Date() })
        var appended = 0
        for step in 0..<40 {
            for _ in 0..<(step % 7 + 1) * 3 {
                try writer.append(deliveryEvent(appended))
                appended += 1
            }
            try writer.sync()
            let m = uploader.metrics
            let onDisk = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasSuffix(".jsonl") && $0 != "rejected.jsonl" }
                .reduce(UInt64(0)) { $0 + ((try? FileManager.default.attributesOfItem(atPath: dir.path + "/" + $1)[.size] as? UInt64) ?? 0) }
            #expect(m.diskBytes == writer.stats.diskBytes && m.diskBytes == onDisk,
                    "after \(appended) records (step \(step)): the reader's beacon_disk_bytes \(m.diskBytes), the writer's \(writer.stats.diskBytes), the segments' sizes \(onDisk)")
            #expect(m.diskBytes <= UInt64(writerConfig.maxBytes) + 4096)
        }
        #expect(writer.stats.dropped[.quotaDeleted, default: 0] > 0, "the quota deleted segments")
    }

    @Test("a tracker's snapshot has the writer's commit latency; the exposition names follow Prometheus' conventions")
    func trackerSnapshotAndExposition() async throws {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("beacon-metrics-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let beacon = try Beacon(configuration: .testing(dir))
        for i in 0..<50 { beacon.track("Tick", properties: ["i": .int(i)]) }
        try await offPool { try beacon.sync() }
        let m = await beacon.metrics
        #expect((m.writerCommitDuration?.count ?? 0) >= 1)
        #expect(m.pendingRecords == 50 && m.oldestPending?.source == .eventTime)
        await beacon.close()
        let text = m.prometheusText()
        for line in text.split(separator: "\n") where !line.hasPrefix("#") {
            let name = line.prefix { $0 != "{" && $0 != " " }
            #expect(name.hasPrefix("beacon_"), "\(line)")
        }
        #expect(text.contains("# TYPE beacon_sent_events_total counter\nbeacon_sent_events_total 0") || text.contains("# HELP beacon_sent_events_total"))
        #expect(text.contains(#"beacon_answers_total{class="2xx"} 0"#))
        #expect(text.contains(#"beacon_writer_commit_duration_seconds_bucket{le="+Inf"} "#))
        #expect(!text.contains("# EOF"))
        let om = m.prometheusText(.openMetrics)
        #expect(om.hasSuffix("# EOF\n") && om.contains("# TYPE beacon_sent_events counter") && om.contains("# UNIT beacon_pending_bytes bytes"))
    }

    @Test("Accept: OpenMetrics only when asked for (and not refused with q=0)", arguments: [
        (nil, BeaconMetrics.ExpositionFormat.prometheus),
        ("text/plain", .prometheus),
        ("application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5", .openMetrics),
        ("text/plain;q=0.5, application/openmetrics-text; version=0.0.1", .openMetrics),
        ("application/openmetrics-text;q=0", .prometheus),
        ("*/*", .prometheus),
    ])
    func accept(header: String?, format: BeaconMetrics.ExpositionFormat) {
        #expect(BeaconMetrics.ExpositionFormat(accept: header) == format)
    }
}
