import Foundation
import Synchronization
import Testing
@testable import Beacon

@Suite struct TrackerTests {
    @Test func recordShapeAndPresets() async throws {
        try await withTrackerDirectoryOffPool { dir in
            var config = Beacon.Configuration.testing(dir)
            config.appVersion = "2.3.1"
            let wall = TestWallClock()
            config.wallClock = { wall.now() }
            let ids = Mutex<UInt64>(41)
            config.trackIdGenerator = { ids.withLock { $0 += 1; return $0 } }
            let beacon = try Beacon(configuration: config)
            beacon.track("Purchase", properties: ["price": 9.99, "item": "book", "vip": true, "count": 3, "tags": ["a", "b"], "none": nil])
            let records = try events(of: beacon)
            #expect(records.count == 1)
            let record = try #require(records.first)
            #expect(record["_track_id"] as? Int == 42)
            #expect(record["time"] as? Int == 1_700_000_000_000)
            #expect(record["type"] as? String == "track")
            #expect(record["event"] as? String == "Purchase")
            #expect(record["distinct_id"] as? String == beacon.anonymousId)
            #expect(record["anonymous_id"] as? String == beacon.anonymousId)
            #expect(record["login_id"] == nil)
            let properties = try #require(record["properties"] as? [String: Any])
            #expect(properties["price"] as? Double == 9.99)
            #expect(properties["item"] as? String == "book")
            #expect(properties["vip"] as? Bool == true)
            #expect(properties["count"] as? Int == 3)
            #expect(properties["tags"] as? [String] == ["a", "b"])
            #expect(properties["none"] is NSNull)
            #expect(properties["$lib"] as? String == "Swift")
            #expect(properties["$lib_version"] as? String == Beacon.libraryVersion)
            #expect(properties["$os"] as? String == "Linux")
            #expect((properties["$os_version"] as? String)?.isEmpty == false)
            #expect((properties["$model"] as? String)?.isEmpty == false)
            #expect(properties["$app_version"] as? String == "2.3.1")
            beacon.closeNow()
        }
    }
}
