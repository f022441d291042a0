import Foundation
import Glibc
import Synchronization
import Testing
import BeaconTestTraits
@testable import Beacon
import BeaconLog
import BeaconTesting
import BeaconTestSupport

/// A `beacon-test-child deliver` process and the lines it printed.
///
/// Its output is read by a thread of its own until ``finish()``, which waits for the child's exit
/// and then for every byte it wrote to be read. Not until the pipe's end: another child started
/// meanwhile (by a test running in parallel) may have inherited the pipe's write end and hold it
/// open long after this one died.
final class DeliverChild: Sendable {
    let process: SpawnedProcess
    let sink = LineSink()

    final class LineSink: Sendable {
        let lines = Mutex<[String]>([])
        let partial = Mutex<String>("")
        /// Set once the child has exited: the reader stops when the pipe holds nothing more.
        let childExited = Atomic(false)
        /// The reader has stopped: `lines` holds everything the child printed.
        let drained = Atomic(false)

        func take(_ bytes: ArraySlice<UInt8>) {
            let complete = partial.withLock { buffer -> [String] in
                buffer += String(decoding: bytes, as: UTF8.self)
                var parts = buffer.components(separatedBy: "\n")
                buffer = parts.removeLast()
                return parts
            }
            lines.withLock { $0.append(contentsOf: complete) }
        }

        /// Reads `fd` until the child has exited and the pipe is empty (or at its end).
        func read(_ fd: Int32) {
            _ = fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK)
            var buffer = [UInt8](repeating: 0, count: 65_536)
            while true {
                // Whether the child had exited before this read: then an empty pipe stays empty.
                let exited = childExited.load(ordering: .sequentiallyConsistent)
                let n = Glibc.read(fd, &buffer, buffer.count)
                if n > 0 { take(buffer[0..<n]); continue }
                if n == 0 { break }
                if errno == EINTR { continue }
                if exited || errno != EAGAIN { break }
                var wait = pollfd(fd: fd, events: Int16(POLLIN), revents: 0)
                _ = poll(&wait, 1, 20)
            }
            let rest = partial.withLock { buffer in defer { buffer = "" }; return buffer }
            if !rest.isEmpty { lines.withLock { $0.append(rest) } }
            drained.store(true, ordering: .sequentiallyConsistent)
        }
    }

    convenience init(directory: String, url: URL, start: Int, count: Int) throws {
        try self.init(arguments: ["deliver", directory, url.absoluteString, String(start), String(count)])
    }

    /// `beacon-test-child` with `arguments` (its role first).
    init(arguments: [String]) throws {
        let process = try SpawnedProcess(try childExecutablePath(), arguments, stdout: .pipe)
        self.process = process
        // The reader keeps the process (and so its pipe's end) until it is done.
        Thread { [sink] in withExtendedLifetime(process) { sink.read(process.output) } }.start()
    }

    var output: [String] { sink.lines.withLock { $0 } }

    /// Waits for the child to exit and for everything it printed to be read: its exit does not
    /// mean its last lines were read, the pipe is read on another thread. Returns whether the
    /// reader finished; the generous bound only matters under load (it returns when it does).
    func finish() async -> Bool {
        process.wait()
        sink.childExited.store(true, ordering: .sequentiallyConsistent)
        return await eventually(30) { self.sink.drained.load(ordering: .sequentiallyConsistent) }
    }

    /// The highest n reported durable.
    var lastDurable: Int? { output.compactMap { $0.hasPrefix("durable ") ? Int($0.dropFirst(8)) : nil }.max() }

    func kill(_ signal: Int32 = SIGKILL) {
        process.signal(signal)
    }
}

/// Each request the collector got: its status, the end of its idempotency key, its retry count
/// and the events' numbers (for failure messages).
func requestSummary(_ collector: LoopbackCollector) -> String {
    collector.requests.map { request in
        let numbers = (request.events ?? []).compactMap { numberedN($0) }
        let range = numbers.first.map { "\($0)...\(numbers.last!)" } ?? "-"
        return "\(request.status.map(String.init) ?? "none") \((request.headers["idempotency-key"] ?? "").suffix(6)) r\(request.headers["x-beacon-retry"] ?? "-") \(range)"
    }.joined(separator: "; ")
}

/// The digits of an event's `_track_id` (a 64-bit number, compared as text).
func trackIdText(_ event: [UInt8]) -> String {
    let text = String(decoding: event, as: UTF8.self)
    guard let range = text.range(of: #""_track_id":"#) else { return "" }
    return String(text[range.upperBound...].prefix { $0.isNumber })
}

@Suite("Delivery: kill -9 while uploading", .serialized, .timeLimit(.minutes(3)), .blocking)
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
            #expect(await eventually(30) { child.output.contains("ready") }, "round \(round) started")
            try await Task.sleep(for: .milliseconds(Int.random(in: 20...250, using: &generator)))
            child.kill()
            #expect(await child.finish(), "round \(round): the output's end")
            if let last = child.lastDurable { durable.formUnion(start...last) }
            tracked.formUnion(start..<(start + perRound))
        }
        // A last run that is not killed delivers the rest and shuts down cleanly.
        let last = try DeliverChild(directory: dir.path, url: collector.url, start: rounds * perRound, count: 30)
        #expect(await last.finish(), "the last run's output's end")
        #expect(last.process.wait() == .exited(0))
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
            let key = request.headers["idempotency-key"] ?? ""
            let ids = events.map { trackIdText($0) }
            let fresh = ids.filter { !seenTrackIds.contains($0) }
            if fresh.count != ids.count {
                // A duplicate: the whole batch again, with the key it had before.
                #expect(fresh.isEmpty, "a request mixes new and already received events")
                #expect(keyBodies[key] == events, "a re-sent batch has the same idempotency key and bytes: \(key) \(events.compactMap { numberedN($0) }); requests: \(requestSummary(collector))")
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

    @Test("kill -9 of the uploader at every request of a run: the restart sends again only the requests in flight (one, or at most the window), each once per kill", arguments: [1, 8])
    func killAtEveryRequest(window: Int) async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let batch = 10, batches = 24
        try deliveryLog(dir, events: 0..<(batch * batches)).close()
        // Run r is killed when the collector has its r-th request, before answering it.
        struct Run { var pid: pid_t = 0; var requests = 0; var killAt = 0 }
        let run = Mutex(Run())
        let collector = try LoopbackCollector { _ in
            guard run.withLock({ r in r.requests += 1; return r.requests == r.killAt }) else { return }
            // The child may ask before the test has noted its pid (never kill pid 0: the test's group).
            for _ in 0..<5000 {
                let pid = run.withLock { $0.pid }
                if pid > 0 {
                    kill(pid, SIGKILL)
                    usleep(20_000)
                    return
                }
                usleep(1000)
            }
        }
        defer { collector.stop() }
        var kills: [Int] = []  // the index in collector.requests of each request a kill cut off
        var finished = false
        for r in 1...batches where !finished {
            let before = collector.requests.count
            run.withLock { $0 = Run(pid: 0, requests: 0, killAt: r) }
            let child = try DeliverChild(arguments: ["upload", dir.path, collector.url.absoluteString, String(batch), String(window)])
            run.withLock { $0.pid = child.process.pid }
            #expect(await child.finish(), "run \(r): the output's end")
            if case .signalled = child.process.wait() {
                kills.append(before + r - 1)
            } else {
                #expect(child.process.wait() == .exited(0) && child.output.last?.hasPrefix("done") == true, "run \(r): \(child.output.suffix(2))")
                finished = true
            }
        }
        #expect(finished, "a run drained the log")
        #expect(kills.count >= 4)
        let requests = collector.requests
        // Every batch arrives whole; each key twice at most: the request a kill cut off, then once more.
        var seen: [String: Int] = [:]
        var firsts: [Int] = []
        for request in requests {
            let key = request.headers["idempotency-key"] ?? ""
            seen[key, default: 0] += 1
            if seen[key] == 1 { firsts += trackIDs(request.events ?? []) }
        }
        #expect(firsts == Array(0..<(batch * batches)), "every event, in order")
        let repeated = requests.indices.filter { i in requests[..<i].contains { $0.headers["idempotency-key"] == requests[i].headers["idempotency-key"] } }
        #expect(seen.values.allSatisfy { $0 <= 2 }, "each batch sent at most twice")
        if window == 1 {
            #expect(repeated.count == kills.count, "one request sent again per kill: \(repeated.count) for \(kills.count) kills; \(requestSummary(collector))")
            for (k, i) in zip(kills, repeated) {
                #expect(requests[i].headers["idempotency-key"] == requests[k].headers["idempotency-key"] && i == k + 1, "the request sent again is the one in flight at the kill")
            }
        } else {
            // Each request sent again was among the window in flight at a kill: written before the
            // kill, so at most `window - 1` requests from the one the kill cut off (the collector
            // still reads, after the kill, what the dead process had written), sent again after it.
            for i in repeated {
                let first = requests.firstIndex { $0.headers["idempotency-key"] == requests[i].headers["idempotency-key"] }!
                #expect(kills.contains { k in abs(first - k) < window && i > k }, "request \(i) repeats \(first), which no kill had in flight; kills at \(kills)")
            }
            #expect(repeated.count <= kills.count * window, "at most the window per kill: \(repeated.count) for \(kills.count) kills")
        }
        print("kill -9 at every request: \(kills.count) kills, \(repeated.count) requests sent again (\(repeated.count * batch) events)")
    }

    @Test("SIGTERM runs the termination handler: shutdown delivers within the grace period, and the program, not the library, decides the exit status")
    func sigterm() async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let collector = try LoopbackCollector()
        defer { collector.stop() }
        let child = try DeliverChild(directory: dir.path, url: collector.url, start: 0, count: 100_000)
        #expect(await eventually(30) { (child.lastDurable ?? 0) >= 50 })
        child.kill(SIGTERM)
        #expect(await child.finish(), "the output's end")
        #expect(child.process.wait() == .exited(3), "the child's own code chose the status: \(child.process.wait())")
        let output = child.output
        #expect(output.contains { $0.hasPrefix("terminated \(SIGTERM) ") }, "the handler's closure ran: \(output.suffix(3))")
        #expect(output.last == "alive", "the process went on after the shutdown: \(output.suffix(3))")
        let last = try #require(child.lastDurable)
        let received = collector.acceptedEvents.compactMap { numberedN($0) }
        #expect(received.count > last, "everything durable before the signal was delivered")
        #expect(received == Array(0..<received.count))
        var readOnly = BeaconLog.Configuration(directory: dir.path)
        readOnly.access = .readOnly
        #expect(try BeaconLog(configuration: readOnly).stats.pendingRecords == 0)
    }
}
