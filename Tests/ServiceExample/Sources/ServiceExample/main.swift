// A Hummingbird 2 service with Beacon as a service of its ServiceGroup.
//
//   GET /track?id=N  tracks one event ("Request", with the id) and answers "ok N"
//   GET /ok          answers "ok", tracks nothing
//   GET /metrics     Beacon's metrics for Prometheus (OpenMetrics when the scraper asks for it)
//
// Configuration from the environment: PORT (default 8080), and Beacon's BEACON_DIRECTORY,
// BEACON_URL, BEACON_HEADERS (Beacon.Configuration.fromEnvironment); SERVICE_EXAMPLE_STALL_FSYNC_WHILE
// is for tests only (see below). SIGTERM or SIGINT stops the HTTP server first (it finishes the
// requests in progress), then Beacon (drain, upload, close).
// WITHOUT_BEACON=1 runs the same service with Beacon's lines left out (no tracker, /track tracks
// nothing): the reference wrk-compare.sh measures Beacon's cost against.
@_spi(Testing) import Beacon   // only for the test-only stall switch below
import Foundation
import Hummingbird
import Logging
import ServiceLifecycle

let logger = Logger(label: "service-example")
let environment = ProcessInfo.processInfo.environment
let port = Int(environment["PORT"] ?? "") ?? 8080

// WITHOUT_BEACON=1 (wrk-compare.sh): the same service with Beacon's lines left out, for comparison;
// it needs no BEACON_* variables.
let withoutBeacon = environment["WITHOUT_BEACON"] == "1"
let beacon: Beacon?
if withoutBeacon {
    beacon = nil
} else {
    var config: Beacon.Configuration
    do {
        config = try Beacon.Configuration.fromEnvironment()
    } catch {
        logger.critical("cannot configure Beacon: \(error)")
        exit(78)   // EX_CONFIG: the program decides to end, not the library
    }
    config.diagnostics = BeaconLogging.diagnostics(to: logger)
    // Test-only (state-changes.sh): every fsync waits while this file exists, a stalled disk
    // without root. Never set it in production.
    if let stallFile = environment["SERVICE_EXAMPLE_STALL_FSYNC_WHILE"], !stallFile.isEmpty {
        config.stallFsync(whileFileExists: stallFile)
    }
    config.shutdownGrace = .seconds(3)   // how long the stop may deliver, within the 5 s a deployment allows
    beacon = try Beacon(configuration: config)
}

let router = Router()
router.get("/ok") { _, _ in "ok" }
router.get("/track") { request, _ -> String in
    let id = request.uri.queryParameters.get("id", as: Int.self) ?? -1
    beacon?.track("Request", properties: ["request_id": id, "route": "/track"])   // an Int variable: no .int(id)
    return "ok \(id)"
}

// The snapshot rendered by Beacon's own renderer (no package dependency, and the same names as
// `beacon send --metrics`, so one dashboard serves both), on this service's own route.
router.get("/metrics") { request, _ -> Response in
    let format = BeaconMetrics.ExpositionFormat(accept: request.headers[.accept])
    guard let beacon else { return Response(status: .notFound) }   // WITHOUT_BEACON=1
    let text = (await beacon.metrics).prometheusText(format)
    return Response(status: .ok, headers: [.contentType: format.contentType], body: .init(byteBuffer: ByteBuffer(string: text)))
}

let app = Application(
    router: router,
    configuration: .init(address: .hostname("127.0.0.1", port: port)),
    logger: logger
)
// A group shuts its services down in reverse order: the HTTP server first, then Beacon, so every
// request answered has tracked its event before Beacon drains.
let group = ServiceGroup(
    configuration: .init(
        services: beacon.map { [BeaconService(beacon: $0), app] } ?? [app],
        gracefulShutdownSignals: [.sigterm, .sigint],
        logger: logger
    )
)
try await group.run()
