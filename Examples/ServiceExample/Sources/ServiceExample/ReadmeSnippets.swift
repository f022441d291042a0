// The README's snippets, compiled (never run: they write to /var/lib). Keep them identical to
// the README: `Examples/ServiceExample/test.sh` builds this package.
import Beacon
import Foundation
import Logging

enum ReadmeSnippets {
    /// "The tracker: `Beacon`".
    static func tracker() async throws {
        var config = Beacon.Configuration(directory: "/var/lib/app/beacon", serverURL: URL(string: "https://collector.example/events"))
        config.appVersion = "2.3.1"
        let beacon = try Beacon(configuration: config)          // opens/recovers the log, takes the writer lock, tracks $AppStart

        beacon.track("Purchase", properties: ["price": 9.99, "item": "book", "vip": true, "tags": ["a", "b"]])
        beacon.track("Login", distinctId: "user-42")           // per-call user, for multi-user services
        beacon.login("user-42"); beacon.logout(); beacon.identify(anonymousId: "device-7")
        beacon.register(superProperties: ["region": "eu"])      // on every event; caller properties win
        beacon.registerDynamicSuperProperties { ["load": 0.3] }
        beacon.profileSet(["plan": "pro"]); beacon.profileIncrement(["logins": 1])

        let timer = beacon.startTimer("video_play")            // handle-based; several may overlap
        timer.pause(); timer.resume(); timer.end(properties: ["title": "intro"])   // $event_duration in ms
        beacon.trackTimerStart("export"); beacon.trackTimerEnd("export")           // by name, as in the seeds

        let report = await beacon.shutdown(deadline: .seconds(1))   // $AppEnd, drain, fsync, upload, release locks
        _ = report
    }

    /// "Diagnostics are rate-limited at the source": the swift-log bridge.
    static func swiftLogBridge(_ config: inout Beacon.Configuration) {
        let logger = Logger(label: "beacon")
        config.diagnostics = { diagnostic in
            logger.warning("\(diagnostic.message)", metadata: [
                "beacon.kind": "\(diagnostic.kind)", "beacon.suppressed": "\(diagnostic.suppressed)",
            ])
        }
    }

    /// "Configuration from the environment".
    static func environment() throws -> Beacon {
        var config = try Beacon.Configuration.fromEnvironment()
        config.appVersion = "2.3.1"
        return try Beacon(configuration: config)
    }
}
