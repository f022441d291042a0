import BeaconLog
import Foundation
import Testing
@testable import Beacon

/// Bad configuration values throw a clear error from `init`, never trap; the collector is named in
/// one place (`delivery.url`).
@Suite("Configuration: bad values throw from init")
struct ConfigurationErrorTests {
    @Test(arguments: ["batchSize", "maxBatchBytes", "flushBulkSize", "isolateAfterFailures", "catchUpBatchSize"])
    func uploaderRefusesANonPositiveValue(_ field: String) throws {
        try withTemporaryDirectory { dir in
            let log = try BeaconLog(directory: dir)
            defer { try? log.close() }
            var config = DeliveryConfiguration(url: URL(string: "http://127.0.0.1:9/events")!)
            switch field {
            case "batchSize": config.batchSize = 0
            case "maxBatchBytes": config.maxBatchBytes = 0
            case "flushBulkSize": config.flushBulkSize = -1
            case "isolateAfterFailures": config.isolateAfterFailures = 0
            default: config.catchUpBatchSize = 0
            }
            do {
                _ = try Uploader(log: log, configuration: config)
                Issue.record("\(field) out of range was accepted")
            } catch let error as DeliveryError {
                #expect(error.code == .configuration && error.message.contains(field), "\(error)")
            }
        }
    }

    @Test func theCollectorIsNamedInOnePlace() throws {
        try withTemporaryDirectory { dir in
            var config = Beacon.Configuration(directory: dir + "/t", serverURL: URL(string: "http://127.0.0.1:9/a"))
            #expect(config.delivery?.url.path == "/a", "serverURL: in the initializer is delivery.url")
            #expect(config.delivery?.batchSize == DeliveryConfiguration(url: URL(string: "http://h/")!).batchSize)
            config.delivery = DeliveryConfiguration(url: URL(string: "http://127.0.0.1:9/b")!)
            config.delivery?.batchSize = 0
            config.diagnostics = { _ in }
            #expect(throws: DeliveryError.self) { _ = try Beacon(configuration: config) }
            #expect(!FileManager.default.fileExists(atPath: dir + "/t"), "nothing is opened before the configuration is checked")
            config.delivery?.batchSize = 7
            config.lifecycleEvents = false
            let beacon = try Beacon(configuration: config)
            #expect(beacon.delivery.uploader?.configuration.url.path == "/b")
            beacon.closeNow()
            #expect(Beacon.Configuration(directory: dir).delivery == nil, "no collector: events stay on disk")
        }
    }

    @Test func aTrackerThatCannotAppendThrows() throws {
        try withTemporaryDirectory { dir in
            var config = Beacon.Configuration(directory: dir)
            config.storage.access = .read
            let error = try #require(throws: BeaconLogError.self) { _ = try Beacon(configuration: config) }
            #expect(error.code == .invalidArgument && error.message.contains("storage.access"))
        }
    }
}
