import BeaconLog
import FaultInjection
import Foundation
import Glibc
import Testing
@testable import Beacon
import BeaconTesting

/// Every ``DropReason`` walked from where the library counts it to where a user reads it: a
/// scenario makes the library drop events for that reason, and the count must then show under the
/// same reason in `stats.dropped` (the tracker's own drops) or `deliveryStats` (delivery's
/// set-asides), in the shutdown or flush report's `dropped`, and in a diagnostic that names it.
/// A reason added without a scenario fails ``everyReasonHasAScenario``.
@Suite("Drop reasons: counted where they happen, read where the user looks", .timeLimit(.minutes(2)))
struct DropReasonWalkTests {
    /// What a scenario left for the user to read.
    struct Seen {
        var stats: BeaconStats
        var report: FlushResult
        var delivery: DeliveryStats
        var diagnostics: [BeaconDiagnostic]
    }

    typealias Scenario = @Sendable () async throws -> Seen

    static let padding = String(repeating: "x", count: 1000)

    /// A tracker in a new temporary directory, diagnostics collected.
    static func tracker(_ configure: (inout Beacon.Configuration) -> Void) throws -> (Beacon, DiagnosticsCollector, String) {
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("beacon-walk-\(UUID().uuidString)").path
        let diagnostics = DiagnosticsCollector()
        var config = Beacon.Configuration.testing(dir, diagnostics: diagnostics)
        configure(&config)
        return (try Beacon(configuration: config), diagnostics, dir)
    }

    /// Shuts the tracker down and gathers what the user reads.
    static func seen(_ beacon: Beacon, _ diagnostics: DiagnosticsCollector, _ dir: String, report: FlushResult? = nil) async -> Seen {
        let stats = beacon.stats
        let delivery = beacon.deliveryStats
        let shutdown = await beacon.shutdown()
        try? FileManager.default.removeItem(atPath: dir)
        return Seen(stats: stats, report: report ?? shutdown, delivery: delivery, diagnostics: diagnostics.all)
    }

    /// Tracks `count` padded events on a thread of its own (they may wait under `.block`).
    static func trackPadded(_ beacon: Beacon, count: Int) async throws {
        try await offPool {
            for i in 0..<count { beacon.track("Walk", properties: ["i": .int(i), "pad": .string(padding)]) }
            try? beacon.sync()
        }
    }

    /// Delivering to an in-memory collector that answers `status` (or 200).
    static func delivering(_ config: inout Beacon.Configuration, _ transport: InMemoryTransport) {
        var delivery = testDelivery(batch: 10)
        delivery.flushBulkSize = 1_000_000
        config.delivery = delivery
        config.transport = transport
    }

    static let scenarios: [DropReason: Scenario] = [
        .closed: {
            let (beacon, diagnostics, dir) = try tracker { _ in }
            beacon.closeNow()
            beacon.track("Late")
            return await seen(beacon, diagnostics, dir)
        },
        .backpressure: {
            let (beacon, diagnostics, dir) = try tracker { c in
                c.handoffBytes = 1; c.storage.durability = .everyRecord; c.backpressure = .dropNewest
            }
            try await trackPadded(beacon, count: 400)
            return await seen(beacon, diagnostics, dir)
        },
        .backpressureTimeout: {
            let (beacon, diagnostics, dir) = try tracker { c in
                c.handoffBytes = 1; c.storage.durability = .everyRecord; c.backpressure = .blockCallingThread(timeout: .zero)
            }
            try await trackPadded(beacon, count: 400)
            return await seen(beacon, diagnostics, dir)
        },
        .quotaExceeded: {
            let (beacon, diagnostics, dir) = try tracker { c in
                c.storage.segmentBytes = 4096; c.storage.maxBytes = 8192; c.storage.quotaPolicy = .rejectNew
            }
            try await trackPadded(beacon, count: 20)
            return await seen(beacon, diagnostics, dir)
        },
        .diskFull: {
            // Every segment write fails with ENOSPC: the log keeps a segment's worth (at least
            // 1 MiB) in memory, then refuses.
            let fs = FaultyFileSystem()
            fs.inject(.write, errno: ENOSPC)
            let (beacon, diagnostics, dir) = try tracker { c in c.storage.fileSystem = fs }
            try await trackPadded(beacon, count: 1500)
            let result = await seen(beacon, diagnostics, dir)
            fs.clearFaults()
            return result
        },
        .logFailed: {
            // An fsync fails (and so does the rewrite's): the log fails and refuses what follows.
            let fs = FaultyFileSystem()
            let (beacon, diagnostics, dir) = try tracker { c in c.storage.fileSystem = fs; c.storage.durability = .everyRecord }
            fs.inject(.sync, errno: EIO)
            fs.inject(.syncData, errno: EIO)
            try await offPool {
                for i in 0..<20 { beacon.track("Walk", properties: ["i": .int(i)]); try? beacon.sync() }
            }
            return await seen(beacon, diagnostics, dir)
        },
        .quotaDeleted: {
            let (beacon, diagnostics, dir) = try tracker { c in c.storage.segmentBytes = 4096; c.storage.maxBytes = 8192 }
            try await trackPadded(beacon, count: 40)
            return await seen(beacon, diagnostics, dir)
        },
        .rejected: {
            let transport = InMemoryTransport()
            // One event refused while the others are accepted (a collector refusing everything
            // is a configuration problem: nothing is set aside).
            transport.setHandler { String(decoding: $0.body, as: UTF8.self).contains(#""i":1"#) ? .status(400, body: "bad row") : nil }
            let (beacon, diagnostics, dir) = try tracker { c in delivering(&c, transport) }
            for i in 0..<3 { beacon.track("Walk", properties: ["i": .int(i)]) }
            let report = await beacon.flush()
            return await seen(beacon, diagnostics, dir, report: report)
        },
        .expired: {
            let transport = InMemoryTransport()
            let wall = TestWallClock()
            let (beacon, diagnostics, dir) = try tracker { c in
                delivering(&c, transport)
                c.delivery?.maxEventAge = .seconds(3600)
                c.wallClock = { wall.now() }
            }
            for i in 0..<3 { beacon.track("Walk", properties: ["i": .int(i)]) }
            wall.set(wall.now().addingTimeInterval(7200))
            let report = await beacon.flush()
            return await seen(beacon, diagnostics, dir, report: report)
        },
    ]

    @Test func everyReasonHasAScenario() {
        // `.quotaInDoubt` happens only beside a writer in another process (a sidecar's sender,
        // never a tracker's own uploader): QuotaInDoubtTests walks it.
        for reason in DropReason.allCases where Self.scenarios[reason] == nil && reason != .logError && reason != .quotaInDoubt {
            Issue.record("no scenario drops events for \(reason): add one to DropReasonWalkTests.scenarios")
        }
    }

    @Test func explanationsAreDistinctAndNamesStable() {
        let all = DropReason.allCases
        #expect(Set(all.map(\.explanation)).count == all.count)
        #expect(Set(all.map(\.name)).count == all.count)
        for reason in all {
            #expect(!reason.name.contains(" ") && "\(reason)" == reason.name)
            #expect(DropReason(name: reason.name) == reason)
        }
    }

    @Test(arguments: DropReason.allCases.filter { $0 != .logError && $0 != .quotaInDoubt })
    func walk(reason: DropReason) async throws {
        let scenario = try #require(Self.scenarios[reason])
        let seen = try await scenario()
        let reported = seen.report.dropped[reason, default: 0]
        #expect(reported > 0, "\(reason): the report says \(seen.report)")
        if reason == .rejected || reason == .expired {
            // Set aside by delivery: in the delivery stats and rejected.jsonl, not the tracker's.
            #expect(seen.stats.dropped[reason] == nil)
            #expect(reported == (reason == .rejected ? seen.delivery.rejectedEvents : seen.delivery.expiredEvents))
        } else {
            #expect(seen.stats.dropped[reason] == reported, "\(reason): stats \(seen.stats.dropped), report \(seen.report.dropped)")
            #expect(seen.diagnostics.contains { $0.kind == .dropped && $0.message.contains(reason.name) },
                    "\(reason): no diagnostic names it: \(seen.diagnostics.map(\.message))")
        }
        // Nothing else is counted under a reason this scenario did not cause.
        let others = seen.report.dropped.keys.filter { $0 != reason && seen.report.dropped[$0]! > 0 }
        #expect(others.isEmpty || reason == .logFailed || reason == .diskFull, "\(reason): also \(others)")
    }

    /// `.logError` is what the writer files a refusal under when no other reason fits; no tracker
    /// configuration produces one, so the writer is driven directly with a log that refuses
    /// oversized records (the tracker refuses those itself, as a validation rule).
    @Test func anUnforeseenRefusalIsCountedAsLogError() async throws {
        try await withTrackerDirectoryOffPool { dir in
            var config = BeaconLog.Configuration(directory: dir)
            config.maxRecordBytes = 16
            let log = try BeaconLog(configuration: config)
            let failures = Locked<[DropReason?]>([])
            let writer = EventWriter(log: log, capacity: 1 << 20, backpressure: .dropNewest, hooks: .init(
                onAppended: nil, onFailure: { _, reason, _ in failures.withLock { $0.append(reason) } }))
            #expect(writer.enqueue(Array(#"{"a":"far longer than sixteen bytes"}"#.utf8)).isQueued)
            writer.close()
            #expect(failures.withLock { $0 } == [.logError])
            try log.close()
        }
    }
}
