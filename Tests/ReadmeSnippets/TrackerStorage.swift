// A Swift block of README.md, compiled (never run) so that it cannot drift from the API.
// Between the markers: the block verbatim (ReadmeSnippetTests finds it there); the file imports
// exactly what the block imports.
import Beacon
import BeaconLog

func trackerStorage() async throws {
// README begin
var config = Beacon.Configuration(directory: "/var/lib/app/beacon")
config.storage.durability = .everyRecord   // default: 100 records or 10 ms
config.storage.maxBytes = 64 << 20         // disk quota (default 256 MiB); .dropOldest deletes the oldest segment
config.storage.access = .write             // append only, `beacon send` delivers (default .readWrite)
do {
    let beacon = try Beacon(configuration: config)
    await beacon.shutdown(timeout: .seconds(1))
} catch let error as BeaconLogError where error.code == .locked {
    print(error.message)                   // another tracker uses the directory
}
// README end
}
