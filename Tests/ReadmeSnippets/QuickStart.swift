// A Swift block of README.md, compiled (never run) so that it cannot drift from the API.
// Between the markers: the block verbatim (ReadmeSnippetTests finds it there); the file imports
// exactly what the block imports.
import Beacon

func quickStart() async throws {
// README begin
// BEACON_DIRECTORY=/var/lib/app/beacon  BEACON_URL=https://collector.example/v1/events
// BEACON_HEADERS=Authorization=Bearer%20abc   (values percent-encoded, never printed)
let beacon = try Beacon(configuration: .fromEnvironment())

// In a request handler: encodes the event on this thread and queues it for Beacon's writer
// thread; never blocks, never throws (invalid input is counted and reported instead).
beacon.track("Purchase", properties: ["price": 9.99, "item": "book"], distinctId: "user-42")

// When the service stops (the ServiceGroup adapter below does it for you): write, fsync,
// deliver what is pending within the timeout, close. What is not delivered stays on disk.
let report = await beacon.shutdown(timeout: .seconds(2))
print(report)
// README end
}
