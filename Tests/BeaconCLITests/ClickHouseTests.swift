import Beacon
import BeaconLog
import Foundation
import Glibc
import BeaconTestSupport
import Testing
import BeaconTestTraits

// Delivery into a real ClickHouse (Debian's clickhouse-server 18.16 and later), started privately
// on 127.0.0.1 by the suite. Without a server binary every test here is skipped with the reason
// shown (and a banner on standard error), never passed silently.

/// The README's table for Beacon events, named `name`: columns for the record's fields and the
/// `properties` the tests send, deduplicated by `_track_id` (ReplacingMergeTree: a re-sent batch
/// is the same rows with the same sorting key, merged away in the background; `FINAL` merges at
/// query time).
func createEventsTable(_ server: ClickHouseServer, _ name: String) throws {
    try server.query("DROP TABLE IF EXISTS \(name)")
    try server.query("""
        CREATE TABLE \(name) (
            _track_id          UInt64,
            time               UInt64,
            type               String,
            event              String,
            distinct_id        String,
            anonymous_id       String,
            login_id           String,
            `properties.n`     UInt64,
            `properties.price` Float64,
            `properties.item`  String,
            `properties.vip`   UInt8,
            `properties.tags`  Array(String),
            `properties.$lib`  String
        ) ENGINE = ReplacingMergeTree()
        PARTITION BY toYYYYMM(toDate(intDiv(time, 1000)))
        ORDER BY (event, time, _track_id)
        """)
}

/// `count` events as a service would log them, `n` = `from ..< from + count`, with 64-bit
/// `_track_id`s in no particular order. `poison` replaces the `n` of the events it names by raw
/// JSON text (a value the table refuses).
func numberedEvents(_ count: Int, from: Int = 0, poison: [Int: String] = [:]) -> [String] {
    (from..<(from + count)).map { n in
        let trackId = UInt64(truncatingIfNeeded: n &+ 1) &* 0x9E37_79B9_7F4A_7C15
        let nText = poison[n] ?? String(n)
        return #"{"_track_id":\#(trackId),"time":\#(1_700_000_000_000 + n),"type":"track","event":"Purchase","distinct_id":"user-\#(n % 100)","anonymous_id":"anon-\#(n % 100)","properties":{"n":\#(nText),"price":9.99,"item":"book","vip":true,"tags":["a","b"],"$lib":"Swift"}}"#
    }
}

/// What ClickHouse received in `table`: one entry per insert, in arrival order (by the block
/// number of its part: background merges are off on the test server), each with its events'
/// `properties.n`, sorted.
func inserts(_ server: ClickHouseServer, _ table: String) throws -> [[Int]] {
    var byBlock: [Int: [Int]] = [:]
    for row in try server.rows("SELECT _part, properties.n FROM \(table)") {
        let part = row[0].split(separator: "_")
        #expect(part.count == 4 && part[1] == part[2], "part \(row[0]) is one insert (merges are off)")
        byBlock[Int(part[1]) ?? -1, default: []].append(Int(row[1]) ?? -1)
    }
    return byBlock.keys.sorted().map { byBlock[$0]!.sorted() }
}

/// Checks the at-least-once contract on what ClickHouse received and returns the events'
/// first occurrences in arrival order: each insert holds consecutive events (unless
/// `consecutive` is false: events lost by a killed service leave gaps); an insert holds either
/// only new events, all after those before it, or only events received before (a batch re-sent
/// after its answer was lost, whole, or in halves when a batch that kept failing was isolated).
func firstOccurrences(_ inserts: [[Int]], consecutive: Bool = true) -> [Int] {
    var seen = Set<Int>()
    var firsts: [Int] = []
    for batch in inserts {
        guard let low = batch.first, let high = batch.last else { continue }
        #expect(!consecutive || batch == Array(low...high), "an insert holds consecutive events: \(low)...\(high) has \(batch.count)")
        let fresh = batch.filter { !seen.contains($0) }
        if fresh.count != batch.count {
            #expect(fresh.isEmpty, "an insert mixes new and already received events: \(low)...\(high)")
        } else {
            #expect(low > (firsts.last ?? -1), "inserts arrive in order: \(low) after \(firsts.last ?? -1)")
            firsts += batch
            seen.formUnion(batch)
        }
    }
    return firsts
}

/// The number of rows of `table` after deduplication (`FINAL`).
func dedupCount(_ server: ClickHouseServer, _ table: String) throws -> Int {
    Int(try server.query("SELECT count() FROM \(table) FINAL").trimmingCharacters(in: .whitespacesAndNewlines)) ?? -1
}

/// The lines of `DIR/rejected.jsonl`, parsed.
func rejectedEntries(_ dir: String) throws -> [[String: Any]] {
    try lines(of: dir + "/rejected.jsonl").map { try #require(JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]) }
}

/// `properties.n` of a rejected.jsonl entry's record, as text (a poison value need not be a number).
func rejectedN(_ entry: [String: Any]) -> String {
    guard let record = entry["record"] as? [String: Any], let properties = record["properties"] as? [String: Any], let n = properties["n"] else { return "?" }
    return "\(n)"
}

/// A directory holding `events`, appended with `beacon append`.
func appendedLog(_ dir: String, _ events: [String]) throws {
    let append = try BeaconToolRunner.run(["append", dir, "--sync", "none"], stdin: stdinData(events))
    #expect(append.status == 0, "beacon append: \(append.stderr)")
}

@Suite("ClickHouse: a real collector", .serialized, .enabled(if: ClickHouseServer.isAvailable, ClickHouseServer.skipReason), .sharedClickHouse, .timeLimit(.minutes(2)), .blocking)
struct ClickHouseTests {
    @Test("the tracker delivers NDJSON into ClickHouse: one row per event, properties in their columns, each once, in order")
    func tracker() async throws {
        let server = try ClickHouseServer.shared()
        try createEventsTable(server, "tracked")
        try await withTrackerDirectory { dir in
            var config = Beacon.Configuration(directory: dir)
            config.lifecycleEvents = false
            var delivery = DeliveryConfiguration(url: server.insertURL(table: "tracked"))
            delivery.format = .ndjson
            delivery.batchSize = 100
            delivery.catchUpBatchSize = 100
            config.delivery = delivery
            let beacon = try Beacon(configuration: config)
            let count = 1_000
            for n in 0..<count {
                beacon.track("Purchase", properties: ["n": .int(n), "price": 9.99, "item": "book", "vip": .bool(n % 2 == 0), "tags": ["a", "b"]], distinctId: "user-\(n % 7)")
            }
            let report = await beacon.shutdown(timeout: .seconds(30))
            #expect(report.remaining == 0, "\(report)")

            let firsts = firstOccurrences(try inserts(server, "tracked"))
            #expect(firsts == Array(0..<count))
            #expect(try dedupCount(server, "tracked") == count)
            let rows = try server.rows("SELECT properties.n, event, distinct_id, properties.price, properties.item, properties.vip, properties.tags, `properties.$lib` FROM tracked FINAL ORDER BY properties.n LIMIT 3")
            #expect(rows == [
                ["0", "Purchase", "user-0", "9.99", "book", "1", "['a','b']", "Swift"],
                ["1", "Purchase", "user-1", "9.99", "book", "0", "['a','b']", "Swift"],
                ["2", "Purchase", "user-2", "9.99", "book", "1", "['a','b']", "Swift"],
            ])
        }
    }

    @Test("beacon send --format ndjson drains a backlog into ClickHouse, each event once, in order", arguments: [false, true])
    func send(gzip: Bool) throws {
        let server = try ClickHouseServer.shared()
        let table = gzip ? "sent_gzip" : "sent_plain"
        try createEventsTable(server, table)
        try withTemporaryDirectory { dir in
            let count = 2_000
            try appendedLog(dir, numberedEvents(count))
            let send = try BeaconToolRunner.run(["send", dir, "--url", server.insertURL(table: table).absoluteString, "--format", "ndjson", "--batch", "100", "--catch-up-batch", "100"] + (gzip ? ["--gzip"] : []))
            #expect(send.status == 0, "beacon send: \(send.stderr)")
            let received = try inserts(server, table)
            #expect(received.count == count / 100, "one insert per batch of 100")
            #expect(firstOccurrences(received) == Array(0..<count))
            #expect(try dedupCount(server, table) == count)
            #expect(try statusJSON(dir)["pending_records"] as? Int == 0)
        }
    }

    @Test("the ReplacingMergeTree table drops a re-sent backlog: twice the rows stored, each event once after dedup")
    func dedupOfResentBatches() throws {
        let server = try ClickHouseServer.shared()
        try createEventsTable(server, "resent")
        try withTemporaryDirectory { dir in
            let count = 1_000
            try appendedLog(dir + "/a", numberedEvents(count))
            // A copy of the directory re-sends every batch, byte for byte, as a crash after
            // delivery and before the checkpoint would.
            try FileManager.default.copyItem(atPath: dir + "/a", toPath: dir + "/b")
            for copy in ["a", "b"] {
                let send = try BeaconToolRunner.run(["send", dir + "/" + copy, "--url", server.insertURL(table: "resent").absoluteString, "--format", "ndjson", "--batch", "100", "--catch-up-batch", "100"])
                #expect(send.status == 0, "beacon send: \(send.stderr)")
            }
            let received = try inserts(server, "resent")
            #expect(received.count == 2 * count / 100)
            #expect(firstOccurrences(received) == Array(0..<count))
            #expect(try server.query("SELECT count() FROM resent").hasPrefix("\(2 * count)\n"))
            #expect(try dedupCount(server, "resent") == count)
            try server.query("OPTIMIZE TABLE resent FINAL")
            #expect(try server.query("SELECT count(), uniqExact(_track_id) FROM resent") == "\(count)\t\(count)\n", "after the merge, one row per _track_id")
        }
    }

    @Test("ClickHouse killed with SIGKILL mid-stream and restarted: beacon send retries, each event arrives once after dedup, in order")
    func clickHouseKilled() async throws {
        let server = try ClickHouseServer.shared()
        try createEventsTable(server, "outage")
        let dir = temporaryDirectoryPath()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let count = 4_000
        try appendedLog(dir, numberedEvents(count))
        let send = try RunningTool(["send", dir, "--url", server.insertURL(table: "outage").absoluteString, "--format", "ndjson", "--batch", "50", "--catch-up-batch", "50", "--retries", "1000"])
        let midStream = eventually(within: 30) { ((try? inserts(server, "outage").count) ?? 0) >= 20 }
        #expect(midStream, "beacon send started delivering")
        #expect(send.process.isRunning, "the outage starts mid-stream")
        server.kill()
        try await Task.sleep(for: .milliseconds(300))  // the outage
        try server.start()
        let end = try send.finish()
        #expect(end.status == 0, "beacon send: \(end.stderr)")
        #expect(end.stderr.contains("sent \(count) events") || end.stderr.contains("nothing pending"), "\(end.stderr.suffix(500))")
        #expect(firstOccurrences(try inserts(server, "outage")) == Array(0..<count))
        #expect(try dedupCount(server, "outage") == count)
    }

    @Test("the service killed with SIGKILL and restarted on its directory: every durable event arrives once after dedup, in order")
    func serviceKilled() async throws {
        let server = try ClickHouseServer.shared()
        try createEventsTable(server, "restarts")
        let url = server.insertURL(table: "restarts").absoluteString
        let dir = temporaryDirectoryPath()
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let child = try childExecutablePath()
        var durable = Set<Int>()
        var tracked = Set<Int>()
        var generator = SystemRandomNumberGenerator()
        let rounds = 5, perRound = 300
        for round in 0..<(rounds + 1) {
            let last = round == rounds
            let start = round * perRound, count = last ? 30 : perRound
            let out = dir + ".round\(round)"
            defer { try? FileManager.default.removeItem(atPath: out) }
            let service = try RunningTool(["deliver", dir, url, String(start), String(count), "ndjson"], stdoutFile: out, executable: child)
            #expect(eventually(within: 60) { lines(of: out).contains("ready") }, "round \(round) started")
            if last {
                // A last run that is not killed delivers the rest and shuts down cleanly.
                let end = try service.finish()
                #expect(end.status == 0, "\(end.stderr)")
                #expect(lines(of: out).last?.hasPrefix("done") == true, "\(lines(of: out).suffix(3))")
            } else {
                try await Task.sleep(for: .milliseconds(Int.random(in: 20...250, using: &generator)))
                service.kill()
            }
            if let high = lines(of: out).compactMap({ $0.hasPrefix("durable ") ? Int($0.dropFirst(8)) : nil }).max() {
                durable.formUnion(start...high)
            }
            tracked.formUnion(start..<(start + count))
        }
        var readOnly = BeaconLog.Configuration(directory: dir)
        readOnly.access = .readOnly
        #expect(try BeaconLog(configuration: readOnly).stats.pendingRecords == 0, "the clean last run delivered everything")

        let firsts = firstOccurrences(try inserts(server, "restarts"), consecutive: false)
        #expect(firsts == firsts.sorted())
        #expect(durable.isSubset(of: Set(firsts)), "every durable event arrived: missing \(durable.subtracting(firsts).sorted().prefix(10))")
        #expect(Set(firsts).isSubset(of: tracked))
        #expect(try dedupCount(server, "restarts") == firsts.count)
    }

    @Test("a row ClickHouse answers with 400 (a negative number for a UInt64 column) is set aside alone; the rest arrives in order")
    func poison400() throws {
        try poisonRow(table: "poison400", value: "-1", status: 400)
    }

    @Test("a row ClickHouse answers with 500 (a string for a UInt64 column) is isolated and set aside alone; the rest arrives in order")
    func poison500() throws {
        try poisonRow(table: "poison500", value: #""abc""#, status: 500)
    }

    /// Sends 1,000 events, one of them with `value` as its `n`, which ClickHouse answers with `status`.
    func poisonRow(table: String, value: String, status: Int) throws {
        let server = try ClickHouseServer.shared()
        try createEventsTable(server, table)
        let count = 1_000, poison = 437
        // ClickHouse's own answer to the row, so that the test states which answer it exercises.
        let direct = try server.request(path: "", body: Data((numberedEvents(1, from: poison, poison: [poison: value])[0] + "\n").utf8), query: [
            URLQueryItem(name: "query", value: "INSERT INTO \(table) FORMAT JSONEachRow"),
            URLQueryItem(name: "input_format_import_nested_json", value: "1"),
        ], timeout: 10)
        #expect(direct.status == status, "ClickHouse answers the poison row with \(direct.status): \(direct.text)")
        try withTemporaryDirectory { dir in
            try appendedLog(dir, numberedEvents(count, poison: [poison: value]))
            // One request at a time: this checks the strict order of the one-request path (with a
            // window, the batches behind the poison one may arrive first: DeliveryWindowTests).
            let send = try BeaconToolRunner.run(["send", dir, "--url", server.insertURL(table: table).absoluteString, "--format", "ndjson", "--batch", "100", "--catch-up-batch", "100", "--window", "1"])
            #expect(send.status == 0, "beacon send: \(send.stderr)")
            let rejected = try rejectedEntries(dir)
            #expect(rejected.count == 1, "only the poison row is set aside: \(rejected.map(rejectedN))")
            #expect(rejected.first.map(rejectedN) == (value == "-1" ? "-1" : "abc"))
            #expect(rejected.first?["status"] as? Int == status)
            let expected = Array(0..<poison) + Array((poison + 1)..<count)
            #expect(firstOccurrences(try inserts(server, table)) == expected)
            #expect(try dedupCount(server, table) == count - 1)
        }
    }
}
