// A Swift block of README.md, compiled (never run) so that it cannot drift from the API.
// Between the markers: the block verbatim (ReadmeSnippetTests finds it there); the file imports
// exactly what the block imports.
import Beacon
import Foundation

func configuringDelivery() throws {
// README begin
let token = ProcessInfo.processInfo.environment["COLLECTOR_TOKEN"] ?? ""
var delivery = DeliveryConfiguration(url: URL(string: "https://collector.example.com/v1/events")!)
delivery.format = .ndjson                 // .jsonArray (default), .envelope or .ndjson
delivery.gzip = true                      // Content-Encoding: gzip (default off)
delivery.batchSize = 500                  // events per request (default 50)
delivery.catchUpBatchSize = 5_000         // per request while behind (default nil: up to maxBatchBytes)
delivery.maxBatchBytes = 4 << 20          // body cap before gzip (default 1 MiB; one event always goes)
delivery.headers["Authorization"] = "Bearer \(token)"   // credentials in headers, never printed
delivery.requestTimeout = .seconds(30)    // default 30 s

var config = Beacon.Configuration(directory: "/var/lib/app/beacon")
config.delivery = delivery
let beacon = try Beacon(configuration: config)
// README end
    _ = beacon
}
