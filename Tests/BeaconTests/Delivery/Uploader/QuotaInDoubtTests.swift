import BeaconLog
import Foundation
import Testing
@testable import Beacon
import BeaconTesting

/// The quota of a writer in another process (`beacon append`) deletes segments a sender (`beacon
/// send`) had sent from before it was killed: `delivery.inflight` says which ranges the collector
/// had accepted (delivered, acknowledgement not yet durable) and which were sent without a
/// recorded answer (in doubt: maybe delivered). The restarted sender settles them: accepted ones
/// are taken back out of `dropped[.quotaDeleted]`, unanswered ones move to
/// `dropped[.quotaInDoubt]`, and `quotaDeleted` is left with exactly the records never sent. On
/// ef2d39b every one of them stayed counted as `quotaDeleted` (the chaos harness found the count
/// 1,000-2,100 above the truth in 4-minute runs).
@Suite("The quota's drops of what a killed sender had in flight", .timeLimit(.minutes(2)))
struct QuotaInDoubtTests {
    /// A `.write` log in `dir` with 4 KiB segments and a quota of four of them.
    static func writer(_ dir: String) throws -> BeaconLog {
        var config = BeaconLog.Configuration(directory: dir)
        config.access = .write
        config.durability = .none
        config.segmentBytes = 4096
        config.maxBytes = 16 << 10
        return try BeaconLog(configuration: config)
    }

    static func reader(_ dir: String, access: BeaconLog.Access = .read) throws -> BeaconLog {
        var config = BeaconLog.Configuration(directory: dir)
        config.access = access
        return try BeaconLog(configuration: config)
    }

    /// The drops as `beacon status` reports them once every instance has closed.
    static func reported(_ dir: String) throws -> [DropReason: UInt64] {
        let log = try reader(dir, access: .readOnly)
        defer { try? log.close() }
        return log.stats.dropped
    }

    /// A killed sender left `inflight` in `delivery.inflight` (checkpoint still at 0); the writer's
    /// quota then deleted the oldest segments; a new sender delivers the rest.
    /// Returns the gap the quota left, what was delivered, the drops reported and the uploader's stats.
    static func run(inflight: [InflightFile.Range], diagnostics: DiagnosticsCollector = DiagnosticsCollector()) async throws
        -> (gap: Range<UInt64>, delivered: [Int], dropped: [DropReason: UInt64], stats: DeliveryStats) {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let writer = try writer(dir.path)
        for i in 0..<40 { try writer.append(deliveryEvent(i)) }
        try writer.sync()
        try InflightFile(directory: dir.path, fileSystem: SystemFileSystem()).save(inflight)
        for i in 40..<90 { try writer.append(deliveryEvent(i)) }
        try writer.close()
        // The first record the quota left.
        let look = try reader(dir.path, access: .readOnly)
        let first = try #require(try look.read(maxRecords: 1).firstSeq)
        try look.close()
        let transport = InMemoryTransport()
        let log = try reader(dir.path)
        let uploader = try Uploader(log: log, configuration: testDelivery(batch: 10), transport: transport, clock: ManualClock(), diagnostics: diagnostics.handler())
        let result = await uploader.flush()
        #expect(result.outcome.isComplete)
        let stats = uploader.stats
        let delivered = transport.requests.flatMap { trackIDs(in: $0) }
        try log.close()
        return (0..<first, delivered, try reported(dir.path), stats)
    }

    @Test("every place of an unanswered and an accepted range around the gap the quota left: quotaDeleted counts exactly the records never sent, quotaInDoubt the unanswered ones deleted",
          arguments: [0, 10, 30, 45, 60], [0, 20, 40])
    func settlesEveryPlacement(unansweredAt: Int, acceptedAt: Int) async throws {
        // Ranges of 10 the earlier sender had sent; where they overlap, the accepted one holds.
        let unanswered = InflightFile.Range(firstSeq: UInt64(unansweredAt), count: 10, sends: 1, failures: 0, accepted: false)
        let accepted = InflightFile.Range(firstSeq: UInt64(acceptedAt), count: 10, accepted: true)
        let diagnostics = DiagnosticsCollector()
        let (gap, delivered, dropped, stats) = try await Self.run(inflight: [accepted, unanswered].sorted { $0.firstSeq < $1.firstSeq }, diagnostics: diagnostics)
        #expect(gap.count > 20, "the quota deleted the oldest segments (gap \(gap))")
        // The rest delivered once, in order: a range accepted before the gap does not stand for
        // the events after it, one accepted after it does (its part after the batch cut across it).
        let acceptedAfter = Set(acceptedAt..<acceptedAt + 10).subtracting(0..<Int(gap.upperBound))
        #expect(delivered == delivered.sorted() && Set(delivered).count == delivered.count, "\(delivered)")
        #expect(Set(delivered).union(acceptedAfter) == Set(Int(gap.upperBound)..<90), "\(delivered)")
        let acceptedSeqs = Set(acceptedAt..<acceptedAt + 10).intersection(Set(Int(gap.lowerBound)..<Int(gap.upperBound)))
        let inDoubtSeqs = Set(unansweredAt..<unansweredAt + 10).intersection(Set(Int(gap.lowerBound)..<Int(gap.upperBound))).subtracting(acceptedSeqs)
        let neverSent = gap.count - acceptedSeqs.count - inDoubtSeqs.count
        #expect(dropped[.quotaDeleted, default: 0] == UInt64(neverSent), "\(dropped)")
        #expect(dropped[.quotaInDoubt, default: 0] == UInt64(inDoubtSeqs.count), "\(dropped)")
        #expect(stats.inDoubtEvents == UInt64(inDoubtSeqs.count))
        if let low = inDoubtSeqs.min(), let high = inDoubtSeqs.max() {
            #expect(diagnostics.all.contains { $0.subject == DropReason.quotaInDoubt.name && $0.message.contains("seqs \(low)-\(high)") },
                    "a diagnostic names the seqs in doubt: \(diagnostics.all.map(\.message))")
        }
    }

    @Test("a restarted reader finding the same gap (a crash before the checkpoint moved) settles it once")
    func settlingTwiceCountsOnce() throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let writer = try Self.writer(dir.path)
        for i in 0..<200 { try writer.append(deliveryEvent(i)) }
        try writer.close()
        let quota = try Self.reported(dir.path)[.quotaDeleted, default: 0]
        #expect(quota > 40)
        let sent: [(seqs: Range<UInt64>, accepted: Bool)] = [(0..<10, true), (10..<20, false)]
        for _ in 0..<3 {
            let log = try Self.reader(dir.path)
            log.settleDropped(0..<quota, sent: sent)
            // Killed: the checkpoint never moved.
            try log.close()
        }
        let dropped = try Self.reported(dir.path)
        #expect(dropped[.quotaDeleted] == quota - 20 && dropped[.quotaInDoubt] == 10, "\(dropped)")
    }
}
