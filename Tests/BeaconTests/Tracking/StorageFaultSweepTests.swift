import BeaconLog
import BeaconTesting
import FaultInjection
import Foundation
import Glibc
import Testing
@testable import Beacon

/// `ENOSPC` and `EIO` at every call on each file the tracker and the uploader write beside the
/// segments (`rejected.jsonl`, `delivery.inflight`, `identity.json`, the counters): the fault is
/// injected at the k-th call on that file, for every k a fault-free run makes. After each, no event
/// is lost (delivered, pending in the log, or in `rejected.jsonl`), none is set aside or counted
/// twice, and the identity survives.
@Suite("Faults on the tracker's own files")
struct StorageFaultSweepTests {
    static let errnos: [Int32] = [ENOSPC, EIO]
    static let poisoned: Set<Int> = [2, 7]
    static let expired = 10
    static let events = 12
    /// The uploader's wall clock: 100 s after the events' time, so only the expired one is older than an hour.
    static let now = Date(timeIntervalSince1970: 1_700_000_100)

    /// One delivery run: a log of `events` events (two refused with 400, one expired), drained
    /// through an uploader with batches of 4, the file system faulted as `inject` says.
    struct DeliveryRun {
        let dir = DeliveryTempDir()
        let fs = FaultyFileSystem()
        let log: BeaconLog
        let transport = InMemoryTransport()
        let uploader: Uploader

        init() throws {
            fs.skipSyncs = true
            var config = BeaconLog.Configuration(directory: dir.path)
            config.fileSystem = fs
            config.durability = .none
            let log = try BeaconLog(configuration: config)
            for i in 0..<StorageFaultSweepTests.events {
                let base: Int64 = i == StorageFaultSweepTests.expired ? 1_600_000_000_000 : 1_700_000_000_000
                try log.append(deliveryEvent(i, timeBase: base, marker: StorageFaultSweepTests.poisoned.contains(i) ? "POISON" : nil))
            }
            try log.sync()
            self.log = log
            transport.setHandler { String(decoding: $0.body, as: UTF8.self).contains("POISON") ? .status(400, body: "poisoned") : nil }
            var delivery = testDelivery(batch: 4)
            delivery.maxEventAge = .seconds(3600)
            uploader = try Uploader(log: log, configuration: delivery, transport: transport, clock: ManualClock(), now: { StorageFaultSweepTests.now })
            fs.resetJournal()
        }

        /// The `_track_id`s the collector accepted (answered 200), in order, repeats included.
        var delivered: [Int] {
            transport.requests.filter { !String(decoding: $0.body, as: UTF8.self).contains("POISON") }.flatMap { trackIDs(in: $0) }
        }

        /// The `_track_id`s in `rejected.jsonl`; records a problem for a line that is not JSON.
        func rejected(sourceLocation: SourceLocation = #_sourceLocation) -> [Int] {
            dir.rejectedLines.compactMap { line in
                guard let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any],
                      let record = object["record"] as? [String: Any], let id = record["_track_id"] as? Int else {
                    Issue.record("rejected.jsonl holds a line that is not a whole entry: \(line)", sourceLocation: sourceLocation)
                    return nil
                }
                return id
            }
        }

        /// The `_track_id`s pending in the log, read from its checkpoint (with a fault-free reader).
        func pending() throws -> [Int] {
            var ids: [Int] = []
            var cursor: LogPosition?
            while true {
                let batch = try log.read(from: cursor, maxRecords: 100)
                if batch.isEmpty { return ids }
                ids += trackIDs(batch.records.map(Array.init))
                cursor = batch.end
            }
        }

        /// Flushes until drained (at most 6 tries), with the faults cleared.
        func drain() async -> FlushResult {
            fs.clearFaults()
            var result = await uploader.flush()
            for _ in 0..<5 {
                if case .drained = result.outcome { break }
                if case .noData = result.outcome { break }
                result = await uploader.flush()
            }
            return result
        }

        /// Checks the accounting after a faulted flush and after the drain that follows.
        /// `resendsAllowed`: a fault that can fail an acknowledgement lets delivered events be
        /// sent again (at-least-once); otherwise each is sent once.
        func check(_ label: String, resendsAllowed: Bool) async throws {
            let everyEvent = Set(0..<StorageFaultSweepTests.events)
            let afterFault = Set(delivered).union(rejected()).union(try pending())
            #expect(afterFault == everyEvent, "\(label): after the fault, events in none of delivered, rejected, pending: \(everyEvent.subtracting(afterFault).sorted())")

            let result = await drain()
            let delivered = self.delivered
            let rejected = self.rejected()
            #expect(try pending().isEmpty, "\(label): \(result)")
            #expect(Set(delivered).union(rejected) == everyEvent, "\(label): lost \(everyEvent.subtracting(delivered).subtracting(rejected).sorted())")
            #expect(Set(delivered).isDisjoint(with: rejected), "\(label): delivered and rejected: \(Set(delivered).intersection(rejected).sorted())")
            #expect(rejected.count == Set(rejected).count, "\(label): set aside twice: \(rejected)")
            #expect(Set(rejected) == StorageFaultSweepTests.poisoned.union([StorageFaultSweepTests.expired]), "\(label): rejected \(rejected)")
            if !resendsAllowed {
                #expect(delivered.count == Set(delivered).count, "\(label): sent twice: \(delivered)")
            }
            let stats = uploader.stats
            // Every acceptance is counted once (a batch re-sent after a failed acknowledgement is accepted twice).
            #expect(Int(stats.sentEvents) == delivered.count, "\(label): sentEvents \(stats.sentEvents), accepted \(delivered.count)")
            #expect(Int(stats.rejectedEvents + stats.expiredEvents) == rejected.count, "\(label): counted \(stats.rejectedEvents) + \(stats.expiredEvents) set aside, file holds \(rejected.count)")
            #expect(!FileManager.default.fileExists(atPath: dir.path + "/" + InflightFile.fileName + ".tmp"), "\(label): a temporary file was left")
        }

        func close() {
            try? log.close()
            dir.remove()
        }
    }

    /// How many calls a fault-free run makes that `matches`.
    static func callCount(_ matches: @escaping (FaultyFileSystem.Call) -> Bool) async throws -> Int {
        let run = try DeliveryRun()
        defer { run.close() }
        _ = await run.uploader.flush()
        try await run.check("fault-free run", resendsAllowed: false)
        return run.fs.journal.filter(matches).count
    }

    @Test("ENOSPC and EIO at every call on rejected.jsonl and delivery.inflight: every event delivered or set aside, once", arguments: [RejectedFile.fileName, InflightFile.fileName])
    func everyCallOnADeliveryFile(name: String) async throws {
        let calls = try await Self.callCount { $0.path.contains(name) }
        #expect(calls >= 5, "the workload should touch \(name)")
        for e in Self.errnos {
            for k in 1...calls {
                let run = try DeliveryRun()
                defer { run.close() }
                run.fs.inject(nil, errno: e, path: name, onCall: k)
                _ = await run.uploader.flush()
                #expect(run.fs.journal.contains { $0.failed }, "\(name) call \(k): the fault did not fire")
                try await run.check("\(name), call \(k) of \(calls) fails with errno \(e)", resendsAllowed: false)
            }
        }
    }

    @Test("ENOSPC and EIO at every directory fsync while delivering (a new rejected.jsonl's entry, the first checkpoint)")
    func everyDirectoryFsync() async throws {
        let calls = try await Self.callCount { $0.operation == .syncDirectory }
        #expect(calls >= 1)
        for e in Self.errnos {
            for k in 1...calls {
                let run = try DeliveryRun()
                defer { run.close() }
                run.fs.inject(.syncDirectory, errno: e, onCall: k)
                _ = await run.uploader.flush()
                try await run.check("directory fsync \(k) of \(calls) fails with errno \(e)", resendsAllowed: true)
            }
        }
    }

    @Test("A fault that lasts (disk full): nothing is lost while it lasts, all is delivered or set aside once it clears", arguments: [RejectedFile.fileName, InflightFile.fileName])
    func aLastingFault(name: String) async throws {
        for e in Self.errnos {
            let run = try DeliveryRun()
            defer { run.close() }
            run.fs.inject(.pwrite, errno: e, path: name)
            for _ in 0..<3 { _ = await run.uploader.flush() }
            try await run.check("every write to \(name) fails with errno \(e)", resendsAllowed: false)
        }
    }

    @Test("A refused event is set aside even when an expired event after it in the same batch was set aside first", arguments: [(0, 2), (1, 3), (0, 3), (2, 3)])
    func refusedBeforeExpiredInOneBatch(refused: Int, expired: Int) async throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try BeaconLog(directory: dir.path)
        defer { try? log.close() }
        for i in 0..<4 {
            try log.append(deliveryEvent(i, timeBase: i == expired ? 1_600_000_000_000 : 1_700_000_000_000, marker: i == refused ? "POISON" : nil))
        }
        let transport = InMemoryTransport()
        transport.setHandler { String(decoding: $0.body, as: UTF8.self).contains("POISON") ? .status(400) : nil }
        var delivery = testDelivery(batch: 4)
        delivery.maxEventAge = .seconds(3600)
        let uploader = try Uploader(log: log, configuration: delivery, transport: transport, clock: ManualClock(), now: { Self.now })
        _ = await uploader.flush()
        let rejected = dir.rejectedLines.compactMap { line -> Int? in
            let object = try? JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any]
            return (object?["record"] as? [String: Any])?["_track_id"] as? Int
        }
        #expect(Set(rejected) == [refused, expired])
        #expect(log.stats.pendingRecords == 0)
    }

    // MARK: identity.json

    /// A tracker on `dir` with `fs`, no delivery, no lifecycle events.
    static func tracker(_ dir: String, _ fs: any FileSystem, diagnostics: DiagnosticsSink) throws -> Beacon {
        var config = Beacon.Configuration(directory: dir)
        config.lifecycleEvents = false
        config.storage.fileSystem = fs
        let sink = diagnostics.handler
        config.diagnostics = { sink("\($0.kind): \($0.message)") }
        return try Beacon(configuration: config)
    }

    /// Opens a tracker whose k-th call on identity.json fails, logs in, closes; returns whether the fault fired.
    static func identityRun(_ dir: String, errno e: Int32?, onCall k: Int?) throws -> (calls: Int, fired: Bool, diagnostics: [String]) {
        let fs = FaultyFileSystem()
        fs.skipSyncs = true
        if let e { fs.inject(nil, errno: e, path: "identity.json", onCall: k) }
        let sink = DiagnosticsSink()
        let beacon = try tracker(dir, fs, diagnostics: sink)
        beacon.login("bob")
        beacon.closeNow()
        let calls = fs.journal.filter { $0.path.contains("identity.json") }
        return (calls.count, calls.contains { $0.failed }, sink.all)
    }

    @Test("ENOSPC and EIO at every call on identity.json: the stored identity survives, old or new, never garbage")
    func everyCallOnTheIdentity() throws {
        let calls = try identityCalls()
        for e in Self.errnos {
            for k in 1...calls {
                let dir = DeliveryTempDir()
                defer { dir.remove() }
                let original = try Self.originalIdentity(dir.path)
                let run = try Self.identityRun(dir.path, errno: e, onCall: k)
                let label = "identity.json call \(k) of \(calls) fails with errno \(e)"
                #expect(run.fired, "\(label): the fault did not fire")
                let sink = DiagnosticsSink()
                let again = try Self.tracker(dir.path, SystemFileSystem(), diagnostics: sink)
                defer { again.closeNow() }
                #expect(again.anonymousId == original, "\(label): the anonymous id changed; diagnostics \(run.diagnostics)")
                #expect(again.loginId == nil || again.loginId == "bob", "\(label): login id \(again.loginId ?? "nil")")
                #expect(sink.all.isEmpty, "\(label): reopening reported \(sink.all)")
                #expect(!FileManager.default.fileExists(atPath: dir.path + "/identity.json.tmp"), "\(label): a temporary file was left")
                if run.diagnostics.isEmpty {
                    #expect(again.loginId == "bob", "\(label): the login was saved without a report, yet is gone")
                } else {
                    #expect(run.diagnostics.contains { $0.contains("identity.json") }, "\(label): the report does not name the file: \(run.diagnostics)")
                }
            }
        }
    }

    /// Creates the identity in `dir` without faults and returns its anonymous id.
    static func originalIdentity(_ dir: String) throws -> String {
        let beacon = try tracker(dir, SystemFileSystem(), diagnostics: DiagnosticsSink())
        defer { beacon.closeNow() }
        return beacon.anonymousId
    }

    func identityCalls() throws -> Int {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        _ = try Self.originalIdentity(dir.path)
        let run = try Self.identityRun(dir.path, errno: nil, onCall: nil)
        #expect(run.calls >= 8, "a load and a save should touch identity.json")
        return run.calls
    }

    // MARK: counters

    @Test("ENOSPC and EIO at every call on the counters files: close succeeds, the counts read back are the old or the new ones")
    func everyCallOnTheCounters() throws {
        func session(_ dir: String, _ fs: FaultyFileSystem, refusals: Int) throws {
            var config = BeaconLog.Configuration(directory: dir)
            config.fileSystem = fs
            let log = try BeaconLog(configuration: config)
            for _ in 0..<refusals { _ = try? log.append("{\"a\":\n1}") }
            try log.append(#"{"ok":1}"#)
            try log.close()
        }
        func refused(_ dir: String) throws -> UInt64 {
            let log = try BeaconLog(directory: dir)
            defer { try? log.close() }
            return log.stats.refused[.invalidRecord] ?? 0
        }
        let probe = DeliveryTempDir()
        defer { probe.remove() }
        try session(probe.path, FaultyFileSystem(), refusals: 1)
        let counting = FaultyFileSystem()
        try session(probe.path, counting, refusals: 2)
        let calls = counting.journal.filter { $0.path.contains(".counters") }.count
        #expect(try refused(probe.path) == 3)
        #expect(calls >= 10)
        for e in Self.errnos {
            for k in 1...calls {
                let dir = DeliveryTempDir()
                defer { dir.remove() }
                try session(dir.path, FaultyFileSystem(), refusals: 1)
                let fs = FaultyFileSystem()
                fs.skipSyncs = true
                fs.inject(nil, errno: e, path: ".counters", onCall: k)
                try session(dir.path, fs, refusals: 2)
                let count = try refused(dir.path)
                #expect(count == 1 || count == 3, "counters call \(k) of \(calls) fails with errno \(e): refused[invalid] reads \(count)")
                let leftovers = try FileManager.default.contentsOfDirectory(atPath: dir.path).filter { $0.hasSuffix(".tmp") }
                #expect(leftovers.isEmpty, "counters call \(k) fails with errno \(e): left \(leftovers)")
            }
        }
    }
}
