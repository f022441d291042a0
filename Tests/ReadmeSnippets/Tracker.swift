// A Swift block of README.md, compiled (never run) so that it cannot drift from the API.
// Between the markers: the block verbatim (ReadmeSnippetTests finds it there); the file imports
// exactly what the block imports.
import Beacon
import Foundation

func tracker() async throws {
// README begin
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
beacon.trackTimerStart("export"); beacon.trackTimerEnd("export")           // by name, without a handle

let report = await beacon.shutdown(timeout: .seconds(1))   // $AppEnd, drain, fsync, upload, release locks
// README end
    _ = report
}
