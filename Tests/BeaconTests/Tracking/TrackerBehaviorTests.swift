import Foundation
import Synchronization
import Testing
@testable import Beacon
import BeaconLog
import FaultInjection

/// Counts occurrences of `"key":` in the raw record, to show a key is written once.
func occurrences(of key: String, in bytes: [UInt8]) -> Int {
    let needle = Array("\"\(key)\":".utf8)
    guard bytes.count >= needle.count else { return 0 }
    var count = 0
    for start in 0...(bytes.count - needle.count) where bytes[start..<(start + needle.count)].elementsEqual(needle) { count += 1 }
    return count
}

@Suite struct TrackerBehaviorTests {
    @Test func precedenceCallerOverDynamicOverSuperOverPresets() async throws {
        try await withTrackerDirectoryOffPool { dir in
            var config = Beacon.Configuration.testing(dir)
            config.appVersion = "preset"
            let beacon = try Beacon(configuration: config)
            beacon.register(superProperties: ["a": "super", "b": "super", "c": "super", "$app_version": "super", "$os": "super"])
            beacon.registerDynamicSuperProperties { ["a": "dynamic", "b": "dynamic", "$os": "dynamic", "d": "dynamic"] }
            beacon.track("E", properties: ["a": "caller", "$app_version": "caller"])
            beacon.track("F")
            beacon.registerDynamicSuperProperties(nil)
            beacon.unregister(superProperty: "c")
            beacon.track("G", properties: ["$lib": "caller"])
            beacon.clearSuperProperties()
            beacon.track("H")
            try beacon.sync()
            let raw = try readEventsWhileOpenRaw(beacon)
            let records = try readEventsWhileOpen(beacon).map { try #require($0["properties"] as? [String: Any]) }
            #expect(records.count == 4)
            let e = records[0]
            #expect(e["a"] as? String == "caller")
            #expect(e["b"] as? String == "dynamic")
            #expect(e["c"] as? String == "super")
            #expect(e["d"] as? String == "dynamic")
            #expect(e["$app_version"] as? String == "caller")
            #expect(e["$os"] as? String == "dynamic")
            #expect(e["$lib"] as? String == "Swift")
            let f = records[1]
            #expect(f["a"] as? String == "dynamic")
            #expect(f["$app_version"] as? String == "super")
            let g = records[2]
            #expect(g["a"] as? String == "super" && g["c"] == nil && g["d"] == nil)
            #expect(g["$lib"] as? String == "caller" && g["$os"] as? String == "super")
            let h = records[3]
            #expect(h["a"] == nil && h["$app_version"] as? String == "preset" && h["$os"] as? String == "Linux")
            for bytes in raw {
                for key in ["a", "b", "$app_version", "$os", "$lib", "$model"] { #expect(occurrences(of: key, in: bytes) <= 1, "\(key)") }
            }
            beacon.closeNow()
        }
    }

    @Test func invalidSuperPropertiesAreRefusedOneByOne() async throws {
        try await withTrackerDirectoryOffPool { dir in
            let beacon = try Beacon(configuration: .testing(dir))
            beacon.register(superProperties: ["ok": 1, "bad key": 2, "nan": .double(.nan)])
            #expect(beacon.superProperties == ["ok": 1])
            #expect(beacon.stats.invalid == 2)
            beacon.closeNow()
        }
    }

    @Test func timersWithAManualClock() async throws {
        try await withTrackerDirectoryOffPool { dir in
            var config = Beacon.Configuration.testing(dir)
            let clock = TestClock()
            let wall = TestWallClock()
            config.monotonicClock = clock
            config.wallClock = { wall.now() }
            let beacon = try Beacon(configuration: config)

            // Handle: 1.5 s running, 10 s paused, 0.25 s running → 1750 ms.
            let play = beacon.startTimer("video_play")
            clock.advance(by: .milliseconds(1500))
            play.pause()
            play.pause()
            clock.advance(by: .seconds(10))
            wall.set(Date(timeIntervalSince1970: 1_600_000_000))    // the wall clock jumps back: no effect
            play.resume()
            clock.advance(by: .microseconds(250_001))
            #expect(play.elapsed == .microseconds(1_750_001))
            play.end(properties: ["video": "intro"])
            play.end()                                              // a second end: no duration

            // Overlapping handles with one name measure separately.
            let first = beacon.startTimer("download")
            clock.advance(by: .seconds(1))
            let second = beacon.startTimer("download")
            clock.advance(by: .seconds(2))
            second.end()
            first.end()

            // By name, suspended and resumed (an app sent to the background); a user pause survives resumeAll.
            beacon.trackTimerStart("session")
            let paused = beacon.startTimer("paused")
            paused.pause()
            clock.advance(by: .seconds(3))
            beacon.suspendAllTimers()
            clock.advance(by: .seconds(100))
            let startedWhileSuspended = beacon.startTimer("late")
            clock.advance(by: .seconds(100))
            beacon.resumeAllTimers()
            clock.advance(by: .seconds(2))
            beacon.trackTimerPause("session")
            clock.advance(by: .seconds(50))
            beacon.trackTimerResume("session")
            clock.advance(by: .milliseconds(1))
            beacon.trackTimerEnd("session")
            paused.end()
            startedWhileSuspended.end()
            beacon.trackTimerEnd("never_started")

            try beacon.sync()
            let raw = try readEventsWhileOpenRaw(beacon).map { String(decoding: $0, as: UTF8.self) }
            let records = try readEventsWhileOpen(beacon)
            func duration(_ i: Int) -> String? {
                guard let range = raw[i].range(of: #""$event_duration":"#) else { return nil }
                return String(raw[i][range.upperBound...].prefix { $0 != "," && $0 != "}" })
            }
            #expect(records.map { $0["event"] as? String } == ["video_play", "video_play", "download", "download", "session", "paused", "late", "never_started"])
            #expect(duration(0) == "1750.001")
            #expect((records[0]["properties"] as? [String: Any])?["video"] as? String == "intro")
            #expect(duration(1) == nil)
            #expect(duration(2) == "2000.000")
            #expect(duration(3) == "3000.000")
            #expect(duration(4) == "5001.000")
            #expect(duration(5) == "0.000")
            #expect(duration(6) == "52001.000")   // counts only from resumeAll: 2 s + 50 s + 1 ms
            #expect(duration(7) == nil)
            #expect(records.allSatisfy { $0["time"] as? Int == 1_600_000_000_000 })
            beacon.closeNow()
        }
    }

    @Test func lifecycleEventsCarryTheUptime() async throws {
        try await withTrackerDirectoryOffPool { dir in
            var config = Beacon.Configuration.testing(dir)
            config.lifecycleEvents = true
            let clock = TestClock()
            config.monotonicClock = clock
            let beacon = try Beacon(configuration: config)
            beacon.track("Work")
            clock.advance(by: .milliseconds(42_500))
            beacon.closeNow()
            let raw = try readEvents(dir).map { String(decoding: $0, as: UTF8.self) }
            let records = try readObjects(dir)
            #expect(records.map { $0["event"] as? String } == ["$AppStart", "Work", "$AppEnd"])
            #expect(raw[2].contains(#""$event_duration":42500.000"#))
            #expect(!raw[0].contains("$event_duration"))
        }
    }

    @Test func identityPersistsAcrossReopenAndLoginLogoutIdentify() async throws {
        try await withTrackerDirectoryOffPool { dir in
            let anonymous: String
            do {
                let beacon = try Beacon(configuration: .testing(dir))
                anonymous = beacon.anonymousId
                #expect(beacon.distinctId == anonymous)
                beacon.track("Before")
                beacon.login("user-42")
                #expect(beacon.distinctId == "user-42")
                beacon.track("During")
                beacon.track("Other", distinctId: "user-7")
                beacon.closeNow()
            }
            let attributes = try FileManager.default.attributesOfItem(atPath: dir + "/identity.json")
            #expect((attributes[.posixPermissions] as? NSNumber)?.intValue == 0o600)
            #expect(!FileManager.default.fileExists(atPath: dir + "/identity.json.tmp"))
            do {
                let beacon = try Beacon(configuration: .testing(dir))
                #expect(beacon.anonymousId == anonymous)
                #expect(beacon.loginId == "user-42")
                beacon.track("AfterRestart")
                beacon.logout()
                #expect(beacon.distinctId == anonymous)
                beacon.track("LoggedOut")
                beacon.identify(anonymousId: "device-1")
                beacon.login("")                                  // refused: empty
                beacon.track("Identified")
                #expect(beacon.stats.invalidByRule[.invalidIdentity] == 1)
                beacon.closeNow()
            }
            do {
                let beacon = try Beacon(configuration: .testing(dir))
                #expect(beacon.anonymousId == "device-1")
                #expect(beacon.loginId == nil)
                beacon.closeNow()
            }
            let records = try readObjects(dir)
            let ids = records.map { [$0["event"] as? String, $0["distinct_id"] as? String, $0["anonymous_id"] as? String, $0["login_id"] as? String] }
            #expect(ids == [
                ["Before", anonymous, anonymous, nil],
                ["During", "user-42", anonymous, "user-42"],
                ["Other", "user-7", anonymous, "user-42"],
                ["AfterRestart", "user-42", anonymous, "user-42"],
                ["LoggedOut", anonymous, anonymous, nil],
                ["Identified", "device-1", "device-1", nil],
            ])
        }
    }

    @Test func aDamagedIdentityFileIsReplacedAndReported() async throws {
        try await withTrackerDirectoryOffPool { dir in
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            try Data("not json".utf8).write(to: URL(fileURLWithPath: dir + "/identity.json"))
            let diagnostics = DiagnosticsCollector()
            let beacon = try Beacon(configuration: .testing(dir, diagnostics: diagnostics))
            #expect(!beacon.anonymousId.isEmpty)
            #expect(diagnostics.all.contains { $0.kind == .storage && $0.message.contains("identity.json") })
            let anonymous = beacon.anonymousId
            beacon.closeNow()
            let again = try Beacon(configuration: .testing(dir))
            #expect(again.anonymousId == anonymous)
            again.closeNow()
        }
    }

    @Test func profileRecords() async throws {
        try await withTrackerDirectoryOffPool { dir in
            let beacon = try Beacon(configuration: .testing(dir))
            beacon.login("u1")
            beacon.profileSet(["name": "Ada", "age": 36])
            beacon.profileSetOnce(["first_seen": .date(Date(timeIntervalSince1970: 0))])
            beacon.profileIncrement(["logins": 1, "spent": 9.5])
            beacon.profileIncrement(["logins": "one"])            // refused: not a number
            beacon.profileAppend(["tags": ["a", "b"]])
            beacon.profileUnset("age")
            beacon.profileUnset(["x", "y"], distinctId: "u2")
            beacon.profileDelete()
            let records = try events(of: beacon)
            #expect(records.map { $0["type"] as? String } == ["profile_set", "profile_set_once", "profile_increment", "profile_append", "profile_unset", "profile_unset", "profile_delete"])
            #expect(records.allSatisfy { $0["event"] == nil })
            let properties = records.map { $0["properties"] as? [String: Any] ?? [:] }
            #expect(properties[0]["name"] as? String == "Ada" && properties[0]["age"] as? Int == 36 && properties[0]["$lib"] == nil)
            #expect(properties[1]["first_seen"] as? String == "1970-01-01 00:00:00.000")
            #expect(properties[2]["spent"] as? Double == 9.5)
            #expect(properties[3]["tags"] as? [String] == ["a", "b"])
            #expect(properties[4].keys.sorted() == ["age"] && properties[4]["age"] as? Bool == true)
            #expect(records[5]["distinct_id"] as? String == "u2" && properties[5].keys.sorted() == ["x", "y"])
            #expect(properties[6].isEmpty)
            #expect(records.allSatisfy { $0["login_id"] as? String == "u1" })
            #expect(beacon.stats.invalidByRule[.notANumber] == 1)
            beacon.closeNow()
        }
    }

    @Test func afterCloseEventsAreDroppedAndCounted() async throws {
        try await withTrackerDirectory { dir in
            let diagnostics = DiagnosticsCollector()
            let beacon = try Beacon(configuration: .testing(dir, diagnostics: diagnostics))
            beacon.track("Kept")
            await beacon.close()      // the async close, twice: the second does nothing
            await beacon.close()
            beacon.track("Late")
            #expect(beacon.stats.dropped == [.closed: 1])
            #expect(beacon.stats.tracked == 2)
            #expect(beacon.stats.durable == 1)
            #expect(beacon.stats.pending == 0)
            #expect(diagnostics.all.contains { $0.kind == .dropped && $0.message.contains("Late") })
            #expect(try readObjects(dir).map { $0["event"] as? String } == ["Kept"])
            #expect(writerLockIsReleased(dir))
        }
    }

    @Test func oneTrackerPerDirectory() async throws {
        try await withTrackerDirectoryOffPool { dir in
            let beacon = try Beacon(configuration: .testing(dir))
            let error = #expect(throws: BeaconLogError.self) { try Beacon(configuration: .testing(dir)) }
            #expect(error?.code == .locked)
            beacon.closeNow()
        }
    }

    @Test func theWriterReportsEachCommitToTheAppendHook() async throws {
        try await withTrackerDirectoryOffPool { dir in
            let beacon = try Beacon(configuration: .testing(dir))
            let seen = Mutex<[UInt64]>([])
            beacon.setOnAppended { pending in seen.withLock { $0.append(pending) } }
            for i in 0..<50 { beacon.track("E", properties: ["i": .int(i)]) }
            try beacon.sync()
            let reports = seen.withLock { $0 }
            #expect(!reports.isEmpty)
            #expect(reports == reports.sorted())          // nothing is acknowledged: pending only grows
            #expect(reports.last == 50)
            beacon.closeNow()
        }
    }

    /// A tracker whose last reference goes away inside the append hook (on the writer thread)
    /// closes without waiting for its own thread.
    @Test func releasingTheTrackerFromTheAppendHookDoesNotDeadlock() async throws {
        try await withTrackerDirectory { dir in
            let closed = DispatchSemaphore(value: 0)
            let holder = Locked<Beacon?>(nil)
            do {
                let beacon = try Beacon(configuration: .testing(dir))
                beacon.setOnAppended { _ in
                    let last = holder.withLock { b -> Beacon? in
                        let old = b
                        b = nil
                        return old
                    }
                    guard last != nil else { return }
                    _ = consume last    // the last reference goes here, on the writer thread
                    closed.signal()
                }
                holder.withLock { $0 = beacon }
                beacon.track("E")
            }
            let result = try await offPool { closed.wait(timeout: .now() + 10) }
            #expect(result == .success)
            // The tracker closed itself on its writer thread: the lock is released.
            let released = try await offPool { writerLockIsReleased(dir) }
            #expect(released)
        }
    }

    @Test func theDefaultDiagnosticsAreRateLimited() {
        let limiter = RateLimiter(perSecond: 10)
        let admitted = (0..<100).filter { _ in limiter.admit() != nil }.count
        #expect(admitted == 10)
    }

    @Test func recordsTheLogRefusesAreCountedByReason() async throws {
        try await withTrackerDirectoryOffPool { dir in
            var config = Beacon.Configuration.testing(dir)
            config.storage.segmentBytes = 4096
            config.storage.maxBytes = 8192
            config.storage.quotaPolicy = .rejectNew
            let diagnostics = DiagnosticsCollector()
            config.diagnostics = diagnostics.handler()
            let beacon = try Beacon(configuration: config)
            for i in 0..<200 {
                beacon.track("Fill", properties: ["i": .int(i), "pad": .string(String(repeating: "x", count: 100))])
                if i % 10 == 9 { try? beacon.sync() }
            }
            try? beacon.sync()
            let stats = beacon.stats
            let quota = stats.dropped[.quotaExceeded] ?? 0
            #expect(quota > 0)
            #expect(stats.durable + quota == 200)
            #expect(stats.lastError?.contains("quota") == true)
            #expect(diagnostics.all.contains { $0.kind == .dropped && $0.message.contains("quota") })
            beacon.closeNow()
        }
    }

    @Test func anInvalidDynamicSuperPropertyRefusesTheEvent() async throws {
        try await withTrackerDirectoryOffPool { dir in
            let beacon = try Beacon(configuration: .testing(dir))
            let flip = Mutex(false)
            beacon.registerDynamicSuperProperties { flip.withLock { $0 } ? ["bad key": 1] : ["good": 1] }
            beacon.track("A")
            flip.withLock { $0 = true }
            beacon.track("B")
            let records = try events(of: beacon)
            #expect(records.map { $0["event"] as? String } == ["A"])
            #expect((records.first?["properties"] as? [String: Any])?["good"] as? Int == 1)
            #expect(beacon.stats.invalidByRule[.identifier] == 1)
            beacon.closeNow()
        }
    }

    @Test func aTrackerThatIsNotClosedClosesWhenReleased() async throws {
        try await withTrackerDirectoryOffPool { dir in
            var config = Beacon.Configuration.testing(dir)
            config.lifecycleEvents = true
            do {
                let beacon = try Beacon(configuration: config)
                beacon.track("Work")
            }
            #expect(writerLockIsReleased(dir))
            #expect(try readObjects(dir).map { $0["event"] as? String } == ["$AppStart", "Work", "$AppEnd"])
        }
    }

    /// The thread that drops the last reference (a cooperative thread, maybe) must not wait for
    /// the disk: with every fsync held up, the release returns at once and the close finishes on
    /// the writer thread once the disk answers. A second tracker on the directory waits for it.
    @Test func releasingATrackerDoesNotWaitForTheDisk() async throws {
        try await withTrackerDirectoryOffPool { dir in
            let fs = FaultyFileSystem()
            let gate = DispatchSemaphore(value: 0)
            var config = Beacon.Configuration.testing(dir)
            config.lifecycleEvents = true
            config.storage.fileSystem = fs
            let holder = Mutex<Beacon?>(try Beacon(configuration: config))
            try holder.withLock { beacon in
                beacon?.track("Work")
                try beacon?.sync()
            }
            fs.beforeCall = { operation, _ in
                guard operation == .sync || operation == .syncData || operation == .syncDirectory else { return }
                gate.wait()
                gate.signal()
            }
            let released = DispatchSemaphore(value: 0)
            Thread {
                holder.withLock { $0 = nil }    // the last reference: deinit runs here
                released.signal()
            }.start()
            let returned = released.wait(timeout: .now() + 60) == .success
            gate.signal()
            if !returned { _ = released.wait(timeout: .now() + 60) }
            #expect(returned, "the release waited for an fsync")
            // The close ends on the writer thread; opening again waits for it, then finds it all.
            let again = try Beacon(configuration: .testing(dir))
            again.closeNow()
            fs.beforeCall = nil
            #expect(try readObjects(dir).map { $0["event"] as? String } == ["$AppStart", "Work", "$AppEnd"])
        }
    }

    @Test func trackIdsAreUniqueByDefault() async throws {
        try await withTrackerDirectoryOffPool { dir in
            let beacon = try Beacon(configuration: .testing(dir))
            for i in 0..<2000 { beacon.track("E", properties: ["i": .int(i)]) }
            let ids = try events(of: beacon).compactMap { ($0["_track_id"] as? NSNumber)?.uint64Value }
            #expect(ids.count == 2000)
            #expect(Set(ids).count == 2000)
            beacon.closeNow()
        }
    }
}

extension TrackerBehaviorTests {
    /// `$event_duration` and `$AppEnd`'s uptime are whole microseconds, rounded half away from zero.
    @Test(arguments: [
        (Duration.zero, Int64(0)),
        (.nanoseconds(499), 0),
        (.nanoseconds(500), 1),
        (.nanoseconds(-499), 0),
        (.nanoseconds(-500), -1),
        (.microseconds(1_750_001), 1_750_001),
        (.nanoseconds(1_750_001_499), 1_750_001),
        (.nanoseconds(1_750_001_500), 1_750_002),
        (.seconds(86_400 * 365 * 100), 3_153_600_000_000_000),
    ])
    func durationsRoundToMicroseconds(duration: Duration, expected: Int64) {
        #expect(Beacon.microseconds(duration) == expected)
    }
}
