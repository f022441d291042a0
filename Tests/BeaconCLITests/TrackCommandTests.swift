import BeaconLog
import Foundation
import Testing
import BeaconTestTraits

/// `beacon track`, run as a user would.
@Suite(.blocking) struct TrackCommandTests {
    typealias Run = BeaconToolRunner

    func withDirectory<T>(_ body: (String) throws -> T) throws -> T {
        let path = FileManager.default.temporaryDirectory.appendingPathComponent("beacon-cli-track-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: path) }
        return try body(path)
    }

    func records(_ directory: String) throws -> [[String: Any]] {
        var config = BeaconLog.Configuration(directory: directory)
        config.access = .readOnly
        let log = try BeaconLog(configuration: config)
        defer { try? log.close() }
        return try log.read(maxRecords: 1000).records.map {
            try #require(try JSONSerialization.jsonObject(with: Data($0)) as? [String: Any])
        }
    }

    @Test func tracksOneEventWithTypedValues() throws {
        try withDirectory { dir throws in
            let result = try Run.run(["track", dir, "Purchase", "price=9.99", "item=book", "vip=true", "count=3", "none=null",
                                      "zip=:01234", "note=hello world", "big=1e3", "--distinct-id", "user-1"])
            #expect(result.status == 0, "\(result.stderr)")
            #expect(result.stderr.isEmpty)
            let again = try Run.run(["track", dir, "Second"])
            #expect(again.status == 0)
            let all = try records(dir)
            #expect(all.count == 2)
            let record = try #require(all.first)
            #expect(record["event"] as? String == "Purchase")
            #expect(record["type"] as? String == "track")
            #expect(record["distinct_id"] as? String == "user-1")
            let properties = try #require(record["properties"] as? [String: Any])
            #expect(properties["price"] as? Double == 9.99)
            #expect(properties["item"] as? String == "book")
            #expect(properties["vip"] as? Bool == true)
            #expect(properties["count"] as? Int == 3)
            #expect(properties["none"] is NSNull)
            #expect(properties["zip"] as? String == "01234")
            #expect(properties["note"] as? String == "hello world")
            #expect((properties["big"] as? NSNumber)?.doubleValue == 1000)
            #expect(properties["$lib"] as? String == "Swift")
            // The second run reuses the identity the first one stored.
            let anonymous = try #require(record["anonymous_id"] as? String)
            #expect(all[1]["distinct_id"] as? String == anonymous)
            #expect(FileManager.default.fileExists(atPath: dir + "/identity.json"))
        }
    }

    @Test(arguments: [
        (["9bad"], "identifier"), (["Ok", "time=1"], "reservedName"), (["Ok", "$x=1"], "reservedPrefix"),
        (["Ok", "inf=1e400"], "nonFiniteNumber"), (["Ok", "--distinct-id", ""], "invalidIdentity"),
    ])
    func invalidInputExits65NamingTheRule(_ arguments: [String], _ rule: String) throws {
        try withDirectory { dir throws in
            let result = try Run.run(["track", dir] + arguments)
            #expect(result.status == 65, "\(result.stderr)")
            #expect(result.stderr.contains(rule))
            #expect(try records(dir).isEmpty)
        }
    }

    @Test func usageErrorsExit64() throws {
        try withDirectory { dir throws in
            #expect(try Run.run(["track", dir]).status == 64)
            #expect(try Run.run(["track", dir, "E", "novalue"]).status == 64)
            #expect(try Run.run(["track", dir, "E", "a=1", "a=2"]).status == 64)
            #expect(try Run.run(["track", dir, "E", "--bogus"]).status == 64)
        }
    }

    @Test func aHeldWriterLockExits75() throws {
        try withDirectory { dir throws in
            var config = BeaconLog.Configuration(directory: dir)
            config.access = .write
            let log = try BeaconLog(configuration: config)
            let result = try Run.run(["track", dir, "E"])
            #expect(result.status == 75)
            #expect(result.stderr.contains("writer.lock"))
            try log.close()
            // A reader elsewhere (a delivering process) does not stop `track`.
            var readerConfig = BeaconLog.Configuration(directory: dir)
            readerConfig.access = .read
            let reader = try BeaconLog(configuration: readerConfig)
            #expect(try Run.run(["track", dir, "E"]).status == 0)
            try reader.close()
        }
    }
}
