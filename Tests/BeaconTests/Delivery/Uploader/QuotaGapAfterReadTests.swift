import BeaconLog
import Foundation
import Synchronization
import Testing
@testable import Beacon
import BeaconTesting

/// The writer's quota (`beacon append`, another process) deletes the segment a sender (`beacon
/// send`) had just read and was delivering, and the next segments too: the sender's next read
/// finds a gap while the acknowledgement of what it delivered is still pending (deferred, or not
/// yet written). What it delivered must be counted delivered, not `quotaDeleted`. On 53b7eed
/// settling the gap forgot the records read before it, and saved the gap as settled past them:
/// `.ci/run`'s chaos minute counted 7 (here 50-200 a minute) delivered events as dropped.
@Suite("The quota's gap found while a delivered batch's acknowledgement is pending", .timeLimit(.minutes(2)))
struct QuotaGapAfterReadTests {
    /// A `.write` log in `dir` holding events 0..<40 (`beacon append`), a `.read` log over it
    /// (`beacon send`) and the transport its uploader will use.
    static func writerAndSender(_ dir: DeliveryTempDir) throws -> (BeaconLog, BeaconLog, InMemoryTransport) {
        let writer = try QuotaInDoubtTests.writer(dir.path)
        for i in 0..<40 { try writer.append(deliveryEvent(i)) }
        try writer.sync()
        return (writer, try QuotaInDoubtTests.reader(dir.path), InMemoryTransport())
    }

    @Test("a .read log: records read before a gap and acknowledged after it was settled count as delivered, for every read length",
          arguments: 1...16)
    func readBeforeTheGap(read: Int) throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let writer = try QuotaInDoubtTests.writer(dir.path)
        for i in 0..<20 { try writer.append(deliveryEvent(i)) }
        try writer.sync()
        let reader = try QuotaInDoubtTests.reader(dir.path)
        var delivered = try reader.read(maxRecords: read)
        #expect(delivered.count == read)
        // The quota deletes the segment being read and more.
        for i in 20..<120 { try writer.append(deliveryEvent(i)) }
        try writer.close()
        // Reading goes on through the deleted segment's open descriptor to its end, then finds the gap.
        var next = try reader.read(from: delivered.end, maxRecords: 1, maxBytes: Int.max)
        while let first = next.firstSeq, first == delivered.end.seq {
            delivered = next
            next = try reader.read(from: delivered.end, maxRecords: 1, maxBytes: Int.max)
        }
        let first = try #require(next.firstSeq)
        let readThrough = delivered.end.seq
        #expect(first > readThrough + 10, "the quota left a gap after what was read (read through \(readThrough), next read at \(first))")
        // The sender settles the gap (nothing of it was sent), then acknowledges what it delivered.
        reader.settleDropped(readThrough..<first, sent: [])
        try reader.acknowledge(through: delivered.end)
        try reader.close()
        let dropped = try QuotaInDoubtTests.reported(dir.path)
        #expect(dropped[.quotaDeleted, default: 0] == first - readThrough, "only the \(first - readThrough) records never read were never delivered: \(dropped)")
        #expect(dropped[.quotaInDoubt, default: 0] == 0)
    }

    @Test("an uploader over a .read log, the quota deleting what it reads while request n is answered: quotaDeleted is exactly what the collector never got",
          arguments: 0..<3, (1...16).flatMap { [(batch: $0, window: 1), (batch: $0, window: 8)] })
    func uploaderCountsExactly(dropAt request: Int, batchAndWindow: (batch: Int, window: Int)) async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let (writer, log, transport) = try Self.writerAndSender(dir)
        let requests = Mutex(0)
        let writerFailure = Mutex<String?>(nil)
        transport.setHandler { _ in
            let n = requests.withLock { n in
                defer { n += 1 }
                return n
            }
            guard n == request else { return nil }
            // Another process appends meanwhile: its quota deletes the oldest segments.
            do {
                for i in 40..<120 { try writer.append(deliveryEvent(i)) }
                try writer.sync()
            } catch {
                writerFailure.withLock { $0 = "\(error)" }
            }
            return nil
        }
        var config = testDelivery(batch: batchAndWindow.batch)
        config.maxRequestsInFlight = batchAndWindow.window
        let uploader = try Uploader(log: log, configuration: config, transport: transport, clock: ManualClock())
        var result = await uploader.flush()
        // The first flush may end at what was there when it began.
        if result.outcome.isComplete && result.remaining > 0 { result = await uploader.flush() }
        #expect(result.outcome.isComplete && result.remaining == 0, "\(result)")
        try log.close()
        try writer.close()
        #expect(writerFailure.withLock { $0 } == nil)
        let delivered = Set(transport.requests.flatMap { trackIDs(in: $0) })
        #expect(requests.withLock { $0 } > request, "the quota ran during request \(request)")
        let dropped = try QuotaInDoubtTests.reported(dir.path)
        let total = requests.withLock { $0 } > request ? 120 : 40
        #expect(dropped[.quotaDeleted, default: 0] == UInt64(total - delivered.count),
                "\(total) appended, the collector got \(delivered.count) distinct, so \(total - delivered.count) were never delivered; reported \(dropped)")
        #expect(dropped[.quotaInDoubt, default: 0] == 0, "nothing was sent without an answer: \(dropped)")
    }
}

extension QuotaGapAfterReadTests {
    /// The files the sender (a `.read` log and its uploader) writes: what a SIGKILL leaves of it.
    static let senderFiles = ["checkpoint", "delivery.inflight", "reader.counters"]

    /// A sender started on `dir` after a kill, delivering everything pending to a collector that
    /// accepts all: what it sent.
    static func restartedSender(_ dir: String, _ config: DeliveryConfiguration) async throws -> InMemoryTransport {
        let restarted = try QuotaInDoubtTests.reader(dir)
        let transport = InMemoryTransport()
        let uploader = try Uploader(log: restarted, configuration: config, transport: transport, clock: ManualClock())
        let result = await uploader.flush()
        #expect(result.outcome.isComplete && result.remaining == 0, "\(result)")
        try restarted.close()
        return transport
    }

    @Test("the sender killed as it sends the first batch after a gap, or the second after the quota deleted the first too (its files as they were then, the writer going on): the restarted sender's count is still exact",
          arguments: 0..<3, (1...16).flatMap { [(batch: $0, second: false), (batch: $0, second: true)] })
    func killedAfterTheGap(dropAt request: Int, kill: (batch: Int, second: Bool)) async throws {
        let batch = kill.batch
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let (writer, log, transport) = try Self.writerAndSender(dir)
        struct Seen {
            var requests = 0
            var highest = -1
            var appended = 40
            /// Requests after a gap.
            var afterGap = 0
            /// Ids accepted before the kill.
            var accepted = Set<Int>()
            /// The sender's files at the kill.
            var killed: [String: Data?]?
            var failure: String?
        }
        let seen = Mutex(Seen())
        transport.setHandler { sent in
            let ids = trackIDs(in: sent)
            return seen.withLock { s -> InMemoryTransport.Reply? in
                defer { s.requests += 1 }
                if s.killed != nil { return .failure(TransportError(.network, "killed")) }
                if let first = ids.first, (first > s.highest + 1 && s.requests > request) || s.afterGap > 0 {
                    s.afterGap += 1
                    if s.afterGap == (kill.second ? 2 : 1) {
                        // The sender dies here.
                        s.killed = Dictionary(uniqueKeysWithValues: Self.senderFiles.map { ($0, FileManager.default.contents(atPath: dir.path + "/" + $0)) })
                        return .failure(TransportError(.network, "killed"))
                    }
                }
                // The writer appends meanwhile: its quota deletes the oldest segments (the second
                // time, those the sender read after the first gap).
                if s.requests == request || s.afterGap == 1 {
                    do {
                        for i in s.appended..<(s.appended + 80) { try writer.append(deliveryEvent(i)) }
                        try writer.sync()
                        s.appended += 80
                    } catch {
                        s.failure = "\(error)"
                    }
                }
                s.highest = max(s.highest, ids.max() ?? s.highest)
                s.accepted.formUnion(ids)
                return nil
            }
        }
        var config = testDelivery(batch: batch)
        config.maxRequestsInFlight = 1
        let uploader = try Uploader(log: log, configuration: config, transport: transport, clock: ManualClock())
        _ = await uploader.flush()
        try log.close()
        try writer.close()
        let before = seen.withLock { $0 }
        #expect(before.failure == nil)
        // Reading went on through the deleted segments' open descriptors, or it met a gap.
        if let files = before.killed {
            for (name, data) in files {
                let path = dir.path + "/" + name
                try? FileManager.default.removeItem(atPath: path)
                if let data { try data.write(to: URL(fileURLWithPath: path)) }
            }
        }
        // The restarted sender (or, without a gap, the same one again).
        let again = try await Self.restartedSender(dir.path, config)
        let delivered = before.accepted.union(again.requests.flatMap { trackIDs(in: $0) })
        let dropped = try QuotaInDoubtTests.reported(dir.path)
        let total = before.appended
        // Only the request the kill interrupted was sent without an answer: the quota may have
        // deleted it since (in doubt; the collector here never got it).
        let inDoubt = dropped[.quotaInDoubt, default: 0]
        #expect(inDoubt <= UInt64(batch), "\(dropped)")
        #expect(dropped[.quotaDeleted, default: 0] + inDoubt == UInt64(total - delivered.count),
                "\(total) appended, the collector got \(delivered.count) distinct, so \(total - delivered.count) were never delivered; reported \(dropped) (killed after a gap: \(before.killed != nil), accepted before the kill: \(before.accepted.sorted()))")
    }
}
