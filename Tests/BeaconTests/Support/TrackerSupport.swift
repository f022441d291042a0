import Foundation
import Synchronization
import Testing
@testable import Beacon
import BeaconLog
@_exported import BeaconTestSupport

/// Runs `body` on a thread of its own and waits for it without blocking the concurrency pool.
///
/// Tests that block (fsync waits, `DispatchGroup.wait`, child processes, producer threads) run
/// their body here: on a 2-core machine the cooperative pool has two threads, and blocking them
/// would stall every other async test running in parallel (delivery's timing tests among them).
func offPool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        Thread { continuation.resume(with: Result { try body() }) }.start()
    }
}

/// A temporary directory for a blocking test body run by ``offPool(_:)``; removed afterwards.
func withTrackerDirectoryOffPool(_ body: @escaping @Sendable (String) throws -> Void) async throws {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("beacon-tracker-\(UUID().uuidString)").path
    defer { try? FileManager.default.removeItem(atPath: path) }
    try await offPool { try body(path) }
}

/// True once nobody holds `directory`'s writer lock, polling for up to 2 s: while another test
/// thread spawns a child process, the child holds copies of our descriptors until its `exec`
/// (O_CLOEXEC), so a lock released a moment ago can look held for that long.
func writerLockIsReleased(_ directory: String) -> Bool {
    for _ in 0..<200 {
        if BeaconLog.lockHolder(.writer, directory: directory) == nil { return true }
        usleep(10_000)
    }
    return false
}

/// A monotonic clock the test advances by hand.
final class TestClock: Clock, Sendable {
    struct Instant: InstantProtocol {
        var offset: Duration
        func advanced(by duration: Duration) -> Instant { Instant(offset: offset + duration) }
        func duration(to other: Instant) -> Duration { other.offset - offset }
        static func < (lhs: Instant, rhs: Instant) -> Bool { lhs.offset < rhs.offset }
    }
    let current = Mutex(Instant(offset: .seconds(1000)))
    var now: Instant { current.withLock { $0 } }
    var minimumResolution: Duration { .nanoseconds(1) }
    func sleep(until deadline: Instant, tolerance: Duration?) async throws {}
    func advance(by duration: Duration) { current.withLock { $0.offset += duration } }
}

/// A wall clock the test sets by hand.
final class TestWallClock: Sendable {
    let current = Mutex(Date(timeIntervalSince1970: 1_700_000_000))
    func now() -> Date { current.withLock { $0 } }
    func set(_ date: Date) { current.withLock { $0 = date } }
}

/// Collects diagnostics.
final class DiagnosticsCollector: Sendable {
    let items = Mutex<[BeaconDiagnostic]>([])
    var all: [BeaconDiagnostic] { items.withLock { $0 } }
    func handler() -> @Sendable (BeaconDiagnostic) -> Void { { d in self.items.withLock { $0.append(d) } } }
}

extension Beacon.Configuration {
    /// A configuration for tests: no lifecycle events, diagnostics collected.
    static func testing(_ directory: String, diagnostics: DiagnosticsCollector? = nil) -> Beacon.Configuration {
        var config = Beacon.Configuration(directory: directory)
        config.lifecycleEvents = false
        config.storage.segmentBytes = 64 * 1024
        config.storage.maxBytes = 64 << 20
        if let diagnostics { config.diagnostics = diagnostics.handler() } else { config.diagnostics = { _ in } }
        return config
    }
}

/// Every record in the log directory (acknowledged or not), as raw event bytes, in log order.
func readEvents(_ directory: String) throws -> [[UInt8]] {
    var config = BeaconLog.Configuration(directory: directory)
    config.access = .readOnly
    let log = try BeaconLog(configuration: config)
    defer { try? log.close() }
    var records: [[UInt8]] = []
    var cursor: LogPosition? = log.oldestPosition
    while true {
        let batch = try log.read(from: cursor, maxRecords: 10_000, maxBytes: 64 << 20)
        if batch.isEmpty { break }
        records += batch.records.map { Array($0) }
        cursor = batch.end
    }
    return records
}

/// Every record parsed with Foundation's JSON parser.
func readObjects(_ directory: String) throws -> [[String: Any]] {
    try readEvents(directory).map { bytes in
        try #require(try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
    }
}

/// The events of an open tracker: makes them durable first.
func events(of beacon: Beacon) throws -> [[String: Any]] {
    try beacon.sync()
    return try readEventsWhileOpen(beacon)
}

/// Reads through the tracker's own log (which holds the reader lock).
func readEventsWhileOpen(_ beacon: Beacon) throws -> [[String: Any]] {
    var objects: [[String: Any]] = []
    var cursor: LogPosition? = beacon.log.oldestPosition
    while true {
        let batch = try beacon.log.read(from: cursor, maxRecords: 10_000, maxBytes: 64 << 20)
        if batch.isEmpty { break }
        for record in batch.records {
            objects.append(try #require(try JSONSerialization.jsonObject(with: Data(record)) as? [String: Any]))
        }
        cursor = batch.end
    }
    return objects
}
