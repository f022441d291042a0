@testable import BeaconHTTP
import Foundation
import Synchronization
import Testing
@testable import Beacon
import BeaconLog
import BeaconTesting

/// A temporary log directory, removed by `remove()`.
struct DeliveryTempDir {
    let path: String

    init() {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("beacon-delivery-\(UUID().uuidString)").path
    }

    func remove() { try? FileManager.default.removeItem(atPath: path) }

    var rejectedLines: [String] {
        guard let text = try? String(contentsOfFile: path + "/rejected.jsonl", encoding: .utf8) else { return [] }
        return text.split(separator: "\n").map(String.init)
    }
}

/// The benchmark's `Purchase` event `i`, with `time` shifted by `timeBase`.
func deliveryEvent(_ i: Int, timeBase: Int64 = 1_700_000_000_000, marker: String? = nil) -> [UInt8] {
    let item = marker ?? "book"
    return Array(#"{"distinct_id":"user-\#(i % 1000)","event":"Purchase","time":\#(timeBase + Int64(i)),"_track_id":\#(i),"properties":{"$lib":"Swift","$lib_version":"1.0.0","$os":"Linux","price":9.99,"item":"\#(item)","count":3,"vip":true}}"#.utf8)
}

/// Opens a log in `dir` and appends events `range`.
func deliveryLog(_ dir: DeliveryTempDir, events range: Range<Int> = 0..<0, markerAt: Set<Int> = [], timeBase: Int64 = 1_700_000_000_000) throws -> BeaconLog {
    let log = try BeaconLog(directory: dir.path)
    for i in range { try log.append(deliveryEvent(i, timeBase: timeBase, marker: markerAt.contains(i) ? "POISON" : nil)) }
    try log.sync()
    return log
}

/// The `_track_id` of an event's bytes.
func trackID(_ event: some Collection<UInt8>) -> Int? {
    guard let object = try? JSONSerialization.jsonObject(with: Data(event)) as? [String: Any] else { return nil }
    return object["_track_id"] as? Int
}

func trackIDs(_ events: [[UInt8]]) -> [Int] { events.compactMap { trackID($0) } }

/// The events in a request body sent through an in-memory transport (gunzipped if need be).
func events(in request: TransportRequest) -> [[UInt8]] {
    var body = request.body
    if request.headers["Content-Encoding"] == "gzip" { body = (try? Gzip.decompress(body)) ?? [] }
    return BatchSplitter.events(in: body) ?? []
}

/// The `_track_id`s in a request body sent through an in-memory transport.
func trackIDs(in request: TransportRequest) -> [Int] { trackIDs(events(in: request)) }

/// A configuration for tests: no interval timer, no jitter, small batches.
func testDelivery(_ url: URL = URL(string: "http://127.0.0.1:9/events")!, batch: Int = 10) -> DeliveryConfiguration {
    var config = DeliveryConfiguration(url: url)
    config.batchSize = batch
    // Batches cut at `batch` events also while behind: the suites count and cut requests by it
    // (the default, up to maxBatchBytes while behind, has tests of its own).
    config.catchUpBatchSize = batch
    config.flushInterval = nil
    config.backoff = .init(initial: .seconds(1), maximum: .seconds(8), jitter: false)
    config.requestTimeout = .seconds(5)
    return config
}

/// Collects diagnostics for assertions.
final class DiagnosticsSink: Sendable {
    let lines = Mutex<[String]>([])
    var all: [String] { lines.withLock { $0 } }
    var handler: @Sendable (String) -> Void { { [self] line in lines.withLock { $0.append(line) } } }
}

/// Polls `condition` every 5 ms, suspending between tries, until it holds or `seconds` pass on
/// the monotonic clock; returns whether it held.
func eventually(_ seconds: Double = 30, _ condition: () async -> Bool) async -> Bool {
    let deadline = ContinuousClock.now.advanced(by: .milliseconds(Int64(seconds * 1000)))
    while ContinuousClock.now < deadline {
        if await condition() { return true }
        try? await Task.sleep(for: .milliseconds(5))
    }
    return await condition()
}
