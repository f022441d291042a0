import Foundation
import Glibc
import Synchronization
import Testing
@testable import Beacon
import BeaconTesting

/// A `beacon-test-child deliver` process and the lines it printed.
final class DeliverChild: @unchecked Sendable {
    let process: Process
    let sink = LineSink()

    final class LineSink: Sendable {
        let lines = Mutex<[String]>([])
        let partial = Mutex<String>("")
        /// The pipe reached its end: every line the child printed is in `lines`.
        let ended = Atomic(false)
    }

    init(directory: String, url: URL, start: Int, count: Int) throws {
        process = Process()
        process.executableURL = URL(fileURLWithPath: try testChildPath())
        process.arguments = ["deliver", directory, url.absoluteString, String(start), String(count)]
        let pipe = Pipe()
        process.standardOutput = pipe
        pipe.fileHandleForReading.readabilityHandler = { [sink] handle in
            let data = handle.availableData
            if data.isEmpty {
                handle.readabilityHandler = nil
                let rest = sink.partial.withLock { buffer in defer { buffer = "" }; return buffer }
                if !rest.isEmpty { sink.lines.withLock { $0.append(rest) } }
                sink.ended.store(true, ordering: .sequentiallyConsistent)
                return
            }
            let complete = sink.partial.withLock { buffer -> [String] in
                buffer += String(decoding: data, as: UTF8.self)
                var parts = buffer.components(separatedBy: "\n")
                buffer = parts.removeLast()
                return parts
            }
            sink.lines.withLock { $0.append(contentsOf: complete) }
        }
        try process.run()
    }

    var output: [String] { sink.lines.withLock { $0 } }

    /// Waits for the child to exit and for its output to be read to the end. Its exit does not
    /// mean its last lines were read: the pipe is read on another thread. Returns whether the
    /// end was seen; the generous bound only matters under load (it returns at the end).
    func finish() async -> Bool {
        process.waitUntilExit()
        return await eventually(30) { self.sink.ended.load(ordering: .sequentiallyConsistent) }
    }

    /// The highest n reported durable.
    var lastDurable: Int? { output.compactMap { $0.hasPrefix("durable ") ? Int($0.dropFirst(8)) : nil }.max() }

    func kill(_ signal: Int32 = SIGKILL) {
        Glibc.kill(process.processIdentifier, signal)
    }
}

/// The digits of an event's `_track_id` (a 64-bit number, compared as text).
func trackIdText(_ event: [UInt8]) -> String {
    let text = String(decoding: event, as: UTF8.self)
    guard let range = text.range(of: #""_track_id":"#) else { return "" }
    return String(text[range.upperBound...].prefix { $0.isNumber })
}

@Suite("Delivery: kill -9 while uploading", .serialized, .timeLimit(.minutes(1)))
struct DeliveryKillTests {
    @Test("received (deduplicated) + pending == every durable event, in order; duplicates are whole batches with their key")
    func killLoop() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let collector = try LoopbackCollector()
        defer { collector.stop() }
        collector.enqueue(.status(503), .dropConnection)
        var durable = Set<Int>()
        var tracked = Set<Int>()
        var generator = SystemRandomNumberGenerator()
        let rounds = 8, perRound = 300
        for round in 0..<rounds {
            let start = round * perRound
            let child = try DeliverChild(directory: dir.path, url: collector.url, start: start, count: perRound)
            #expect(await eventually(10) { child.output.contains("ready") }, "round \(round) started")
            try await Task.sleep(for: .milliseconds(Int.random(in: 20...250, using: &generator)))
            child.kill()
            #expect(await child.finish(), "round \(round): the output's end")
            if let last = child.lastDurable { durable.formUnion(start...last) }
            tracked.formUnion(start..<(start + perRound))
        }
        // A last run that is not killed delivers the rest and shuts down cleanly.
        let last = try DeliverChild(directory: dir.path, url: collector.url, start: rounds * perRound, count: 30)
        #expect(await last.finish(), "the last run's output's end")
        #expect(last.process.terminationStatus == 0)
        tracked.formUnion((rounds * perRound)..<(rounds * perRound + 30))
        durable.formUnion((rounds * perRound)..<(rounds * perRound + 30))
        #expect(last.output.last?.hasPrefix("done") == true, "\(last.output.suffix(3))")

        // What is still pending on disk.
        var readOnly = BeaconLog.Configuration(directory: dir.path)
        readOnly.access = .readOnly
        let log = try BeaconLog(configuration: readOnly)
        let pendingBatch = try log.read(maxRecords: 1_000_000, maxBytes: Int.max)
        let pending = pendingBatch.records.compactMap { numberedN($0) }

        // Received, deduplicated by _track_id, first occurrences in order.
        var seenTrackIds = Set<String>()
        var firstOccurrences: [Int] = []
        var keyBodies: [String: [[UInt8]]] = [:]
        for request in collector.requests where request.status.map({ $0 / 100 == 2 }) == true {
            let events = request.events ?? []
            let key = request.header("idempotency-key") ?? ""
            let ids = events.map { trackIdText($0) }
            let fresh = ids.filter { !seenTrackIds.contains($0) }
            if fresh.count != ids.count {
                // A duplicate: the whole batch again, with the key it had before.
                #expect(fresh.isEmpty, "a request mixes new and already received events")
                #expect(keyBodies[key] == events, "a re-sent batch has the same idempotency key and bytes")
            }
            if keyBodies[key] == nil { keyBodies[key] = events }
            for (id, event) in zip(ids, events) where !seenTrackIds.contains(id) {
                seenTrackIds.insert(id)
                firstOccurrences.append(numberedN(event) ?? -1)
            }
        }
        let all = firstOccurrences + pending
        #expect(all == all.sorted(), "FIFO across restarts: first occurrences, then pending, in tracking order")
        #expect(Set(all).count == all.count, "no event twice after deduplication")
        #expect(durable.isSubset(of: Set(all)), "every durable event was received or is pending: missing \(durable.subtracting(all).sorted().prefix(10))")
        #expect(Set(all).isSubset(of: tracked))
        #expect(pending.isEmpty, "the clean last run delivered everything")
    }

    @Test("SIGTERM runs the termination handler: shutdown delivers within the grace period, exit 128+15")
    func sigterm() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let collector = try LoopbackCollector()
        defer { collector.stop() }
        let child = try DeliverChild(directory: dir.path, url: collector.url, start: 0, count: 100_000)
        #expect(await eventually(10) { (child.lastDurable ?? 0) >= 50 })
        child.kill(SIGTERM)
        #expect(await child.finish(), "the output's end")
        #expect(child.process.terminationStatus == 128 + SIGTERM)
        let last = try #require(child.lastDurable)
        let received = collector.acceptedEvents.compactMap { numberedN($0) }
        #expect(received.count > last, "everything durable before the signal was delivered")
        #expect(received == Array(0..<received.count))
        var readOnly = BeaconLog.Configuration(directory: dir.path)
        readOnly.access = .readOnly
        #expect(try BeaconLog(configuration: readOnly).stats.pendingRecords == 0)
    }
}
