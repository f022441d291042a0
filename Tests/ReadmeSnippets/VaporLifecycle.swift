// A Swift block of README.md, compiled (never run) so that it cannot drift from the API.
// Between the markers: the block verbatim (ReadmeSnippetTests finds it there).
// The block is a fragment for Vapor, which Beacon's package cannot depend on: the two Vapor names
// it uses are stood in for below, with Vapor's shapes; what is compiled is its use of Beacon.
import Beacon

final class Application {}
protocol LifecycleHandler { func shutdownAsync(_ app: Application) async }

// README begin
struct BeaconLifecycle: LifecycleHandler {
    let beacon: Beacon
    func shutdownAsync(_ app: Application) async { await beacon.shutdown(timeout: .seconds(2)) }
}
// app.lifecycle.use(BeaconLifecycle(beacon: beacon))
// README end
