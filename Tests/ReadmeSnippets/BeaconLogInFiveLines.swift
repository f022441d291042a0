// A Swift block of README.md, compiled (never run) so that it cannot drift from the API.
// Between the markers: the block verbatim (ReadmeSnippetTests finds it there); the file imports
// exactly what the block imports.
import BeaconLog

/// The README's delivery, a stand-in.
private func send(_ records: [ArraySlice<UInt8>]) throws {}

func beaconLogInFiveLines() throws {
// README begin
let log = try BeaconLog(configuration: .init(directory: "/var/lib/app/events"))
let seq = try log.append(#"{"event":"Purchase","price":9.99}"#)   // durable within 10 ms by default
let batch = try log.read(maxRecords: 50)                            // from the checkpoint, never moves it
try send(batch.records)                                             // your delivery
try log.acknowledge(through: batch.end)                             // durable checkpoint, then old segments go
// README end
    _ = seq
}
