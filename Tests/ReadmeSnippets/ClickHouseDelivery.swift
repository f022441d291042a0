// A Swift block of README.md, compiled (never run) so that it cannot drift from the API.
// Between the markers: the block verbatim (ReadmeSnippetTests finds it there); the file imports
// exactly what the block imports.
// The block is a fragment: it names no imports; these are the ones it needs.
import Beacon
import Foundation

func clickHouseDelivery(password: String) {
// README begin
var delivery = DeliveryConfiguration(url: URL(string:
    "http://clickhouse:8123/?query=INSERT%20INTO%20events%20FORMAT%20JSONEachRow"
    + "&input_format_import_nested_json=1&input_format_skip_unknown_fields=1")!)
delivery.format = .ndjson            // JSONEachRow: one object per line (not a JSON array)
delivery.gzip = true                 // ClickHouse takes Content-Encoding: gzip as it is
delivery.batchSize = 500
delivery.catchUpBatchSize = 5_000    // ClickHouse wants thousands of rows per insert
delivery.headers["X-ClickHouse-User"] = "beacon"
delivery.headers["X-ClickHouse-Key"] = password   // not ?user=…&password=… in the URL
// README end
    _ = delivery
}
