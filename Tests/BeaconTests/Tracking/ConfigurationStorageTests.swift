import BeaconLog
import Foundation
import Synchronization
import Testing
@testable import Beacon

/// `Beacon.Configuration.storage` is the log's configuration, stated once: its defaults are
/// BeaconLog's, what is set on it is what the log opens with, `directory` is the same value, and
/// the earlier property names still reach it.
@Suite("Configuration: the tracker's log settings are a BeaconLog.Configuration")
struct ConfigurationStorageTests {
    /// The settings the tracker passes to the log, as text for comparison.
    static func settings(_ c: BeaconLog.Configuration) -> String {
        "\(c.directory) \(c.access) \(c.durability) \(c.segmentBytes) \(c.maxBytes) \(c.quotaPolicy) \(c.maxRecordBytes)"
    }

    @Test("the defaults are BeaconLog's")
    func defaultsAreBeaconLogs() {
        let config = Beacon.Configuration(directory: "/tmp/d")
        #expect(Self.settings(config.storage) == Self.settings(BeaconLog.Configuration(directory: "/tmp/d")))
        #expect(config.directory == "/tmp/d" && config.storage.directory == "/tmp/d")
    }

    @Test("directory and storage.directory are one value, whichever is set")
    func directoryIsOneValue() {
        var config = Beacon.Configuration(directory: "/tmp/a")
        config.directory = "/tmp/b"
        #expect(config.storage.directory == "/tmp/b")
        config.storage.directory = "/tmp/c"
        #expect(config.directory == "/tmp/c")
        config.storage = BeaconLog.Configuration(directory: "/tmp/e")
        #expect(config.directory == "/tmp/e")
        #expect(Beacon.Configuration(storage: BeaconLog.Configuration(directory: "/tmp/f")).directory == "/tmp/f")
    }

    @Test("what is set on storage is what the log opens with", arguments: [BeaconLog.Access.readWrite, .write])
    func storageReachesTheLog(access: BeaconLog.Access) async throws {
        try await withTrackerDirectoryOffPool { dir in
            var config = Beacon.Configuration(directory: dir)
            config.lifecycleEvents = false
            config.diagnostics = { _ in }
            config.storage.access = access
            config.storage.durability = .batched(records: 7, interval: .milliseconds(3))
            config.storage.segmentBytes = 12_345
            config.storage.maxBytes = 1_234_567
            config.storage.quotaPolicy = .rejectNew
            config.storage.maxRecordBytes = 4321
            let beacon = try Beacon(configuration: config)
            var expected = config.storage
            expected.directory = beacon.log.configuration.directory
            #expect(Self.settings(beacon.log.configuration) == Self.settings(expected))
            // The tracker refuses a record over the log's limit itself, by that same limit.
            #expect(throws: BeaconValidationError.self) {
                try beacon.validate("Big", properties: ["pad": .string(String(repeating: "x", count: 5000))])
            }
            try beacon.validate("Small", properties: ["pad": .string(String(repeating: "x", count: 3000))])
            beacon.closeNow()
        }
    }

    @Test("a storage.onDropped of the user's is called, after the tracker's own report")
    func usersOnDroppedIsKept() async throws {
        try await withTrackerDirectoryOffPool { dir in
            let calls = Mutex<[UInt64]>([])
            let diagnostics = DiagnosticsCollector()
            var config = Beacon.Configuration.testing(dir, diagnostics: diagnostics)
            config.diagnosticsInterval = .zero
            config.storage.segmentBytes = 4096
            config.storage.maxBytes = 8192
            config.storage.onDropped = { n in calls.withLock { $0.append(n) } }
            let beacon = try Beacon(configuration: config)
            for i in 0..<40 {
                beacon.track("Fill", properties: ["i": .int(i), "pad": .string(String(repeating: "x", count: 300))])
                try? beacon.sync()
            }
            let deleted = beacon.stats.dropped[.quotaDeleted] ?? 0
            beacon.closeNow()
            #expect(deleted > 0)
            #expect(calls.withLock { $0.reduce(0, +) } == deleted, "the user's handler saw every deletion")
            #expect(diagnostics.all.contains { $0.subject == DropReason.quotaDeleted.name }, "and the tracker still reports it")
        }
    }
}
