import Beacon
import BeaconLog
import Foundation
import Glibc
import BeaconURLSession

/// Upload: a full log (the workload's events) delivered by the `Uploader` to a collector on
/// 127.0.0.1 in a child process, for 50 and 500 events per request, with and without gzip; timed
/// from the first read to the last acknowledgement (each batch's checkpoint made durable). Modes
/// `batch…` use the default transport (``Uploader/defaultTransport(for:)``), `urlsession_batch…`
/// `HTTPTransport`. The reference `raw` of every mode is the physical limit of the shape: a raw
/// keep-alive loop (``KeepAliveLoop``: one connection, one request in flight, the same prebuilt
/// bodies, the same collector process), run in the same round; `ref_urlsession_loop_…` is a plain
/// URLSession loop against that same reference.
///
/// Collectors: Beacon's loopback collector (`beacon-bench --serve-collector loopback`, which also
/// counts the events, checked, and the body bytes on the wire per event), then nginx answering
/// `return 200` (modes `nginx_…`) when nginx is installed, and the same nginx over https
/// (`nginx_https_batch…`: ``SocketTransport`` with TLS, a throwaway certificate trusted with
/// `caFile`; the reference is the same plain-http keep-alive loop). Also the peak RSS of this process
/// during each upload (sampled every 2 ms; the benchmark's own payloads included), its CPU time
/// per request (beside the loop's: on a small machine the client's CPU bounds its rate), and
/// modes `instant_…`: the uploader with a transport that answers at once, Beacon's own cost.
enum UploadPhase: BenchPhase {
    static let name = "upload"
    static let summary = "full log -> collector process over HTTP, batch 50/500, plain/gzip, default transport and URLSession, vs a raw keep-alive loop; CPU per request, peak RSS"

    static func runRound(_ context: BenchContext) throws -> [Figure] {
        let n = context.quick ? 10_000 : 100_000
        let generated = context.payloads(n)
        var figures: [Figure] = []
        for batch in [50, 500] where context.runs(upload: "instant_batch\(batch)") {
            figures += try instant(context, UploadEvents(generated, batch: batch, quick: context.quick), batch: batch)
        }
        var kinds: [BenchCollector.Kind] = [.loopback]
        if BenchCollector.nginxPath != nil { kinds.append(.nginx) }
        for kind in kinds where context.uploadModes.isEmpty || context.uploadModes.contains(where: { $0.hasPrefix("nginx_") == (kind == .nginx) && !$0.hasPrefix("instant_") }) {
            let collector = try BenchCollector(kind, directory: try context.scratch("beacon-nginx"))
            defer { collector.stop() }
            let prefix = kind == .nginx ? "nginx_" : ""
            for batch in [50, 500] {
                let payloads = UploadEvents(generated, batch: batch, quick: context.quick)
                for gzip in [false, true] {
                    // The reference of every mode of this batch size: the raw keep-alive loop.
                    let mode = prefix + "batch\(batch)" + (gzip ? "_gzip" : "")
                    guard context.runs(upload: mode) else { continue }
                    let loop = try keepAlive(payloads, collector, batch: batch, gzip: gzip, mode: mode)
                    figures += loop
                    figures += try beacon(context, payloads, collector, batch: batch, gzip: gzip, mode: mode, transport: Uploader.defaultTransport(for: collector.url))
                    guard !gzip else { continue }
                    // https to the same nginx, right after http: Beacon's own client with TLS.
                    if let https = collector.httpsURL, context.runs(upload: prefix + "https_batch\(batch)") {
                        let secure = prefix + "https_batch\(batch)"
                        figures += loop.map { $0.renamed(from: mode, to: secure) }
                        figures += try beacon(context, payloads, collector, batch: batch, gzip: false, mode: secure, transport: try SocketTransport(tls: TLSConfiguration(caFile: collector.caFile)), url: https)
                    }
                    // URLSession: Beacon through HTTPTransport, and a plain URLSession loop (a
                    // second reference), each against the same keep-alive loop round.
                    let session = prefix + "urlsession_batch\(batch)"
                    guard context.runs(upload: session) else { continue }
                    figures += loop.map { $0.renamed(from: mode, to: session) }
                    figures += try beacon(context, payloads, collector, batch: batch, gzip: false, mode: session, transport: HTTPTransport())
                    let reference = prefix + "ref_urlsession_loop_batch\(batch)"
                    figures += loop.map { $0.renamed(from: mode, to: reference) }
                    figures += try urlSessionLoop(payloads, collector, batch: batch, mode: reference)
                }
            }
        }
        return figures
    }

    static func beacon(_ context: BenchContext, _ payloads: UploadEvents, _ collector: BenchCollector, batch: Int, gzip: Bool, mode: String, transport: any Transport = HTTPTransport(), url: URL? = nil) throws -> [Figure] {
        let n = payloads.count
        let dir = try context.scratch("beacon-upload-\(mode)")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let log = try filledLog(dir, payloads)
        var config = DeliveryConfiguration(url: url ?? collector.url)
        config.batchSize = batch
        config.gzip = gzip
        config.flushInterval = nil
        let uploader = try Uploader(log: log, configuration: config, transport: transport, diagnostics: { _ in })
        let before = try collector.stats()
        let start = Memory.currentMiB
        var result: FlushResult?
        let cpuBefore = Memory.cpuSeconds
        let (seconds, peak) = Memory.peak {
            time { result = blockOn { await uploader.flush() } }
        }
        let cpu = Memory.cpuSeconds - cpuBefore
        try log.close()
        let after = try collector.stats()
        guard let result, result.outcome.isComplete, result.sent == n else {
            throw BenchFailure("upload \(mode): \(String(describing: result))")
        }
        var figures: [Figure] = [
            .throughput("beacon", "upload", mode, n: n, bytes: payloads.totalBytes, seconds: seconds),
            .value("beacon", "upload", "peak_rss_mib_\(mode)", peak, fields: [("start_mib", format(start, 1))]),
            .value("beacon", "upload", "cpu_us_per_request_\(mode)", cpu * 1e6 / Double((n + batch - 1) / batch)),
        ]
        if let before, let after {
            guard after.events - before.events == n else {
                throw BenchFailure("upload \(mode): the collector accepted \(after.events - before.events) of \(n) events")
            }
            figures.append(.value("beacon", "upload", "wire_bytes_per_event_\(mode)", Double(after.bodyBytes - before.bodyBytes) / Double(n), fields: [("n", String(n))]))
        }
        return figures
    }

    /// Beacon's own cost per request: the same upload through a transport that answers 200 at
    /// once (no socket), so what remains is reading, building the body, the key and the
    /// acknowledgements.
    static func instant(_ context: BenchContext, _ payloads: UploadEvents, batch: Int) throws -> [Figure] {
        let n = payloads.count
        let mode = "instant_batch\(batch)"
        let dir = try context.scratch("beacon-upload-\(mode)")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let log = try filledLog(dir, payloads)
        var config = DeliveryConfiguration(url: URL(string: "http://127.0.0.1:9/")!)
        config.batchSize = batch
        config.flushInterval = nil
        let uploader = try Uploader(log: log, configuration: config, transport: InstantTransport(), diagnostics: { _ in })
        var result: FlushResult?
        let cpuBefore = Memory.cpuSeconds
        let seconds = time { result = blockOn { await uploader.flush() } }
        let cpu = Memory.cpuSeconds - cpuBefore
        try log.close()
        guard let result, result.outcome.isComplete, result.sent == n else {
            throw BenchFailure("upload \(mode): \(String(describing: result))")
        }
        return [
            .throughput("beacon", "upload", mode, n: n, bytes: payloads.totalBytes, seconds: seconds),
            .value("beacon", "upload", "us_per_request_\(mode)", seconds * 1e6 / Double((n + batch - 1) / batch)),
            .value("beacon", "upload", "cpu_us_per_request_\(mode)", cpu * 1e6 / Double((n + batch - 1) / batch)),
        ]
    }

    /// A log in `dir` holding the workload's events, durable.
    static func filledLog(_ dir: String, _ payloads: UploadEvents) throws -> BeaconLog {
        let log = try BeaconLog(configuration: {
            var c = BeaconLog.Configuration(directory: dir)
            c.durability = .none
            c.maxBytes = 4 << 30
            return c
        }())
        for _ in 0..<payloads.repeats { for event in payloads.events { try log.append(event) } }
        try log.sync()
        return log
    }

    /// The reference: the raw keep-alive loop (``KeepAliveLoop``) sending the same events.
    static func keepAlive(_ payloads: UploadEvents, _ collector: BenchCollector, batch: Int, gzip: Bool, mode: String) throws -> [Figure] {
        let n = payloads.count
        let bodies = payloads.repeated(KeepAliveLoop.bodies(payloads.events, batch: batch, gzip: gzip))
        let before = try collector.stats()
        let start = Memory.currentMiB
        let cpuBefore = Memory.cpuSeconds
        let (seconds, peak) = try Memory.peak { try KeepAliveLoop.run(bodies, port: collector.port, gzip: gzip) }
        let cpu = Memory.cpuSeconds - cpuBefore
        if let before, let after = try collector.stats(), after.events - before.events != n {
            throw BenchFailure("upload \(mode), keep-alive loop: the collector accepted \(after.events - before.events) of \(n) events")
        }
        return [
            .throughput("raw", "upload", mode, n: n, bytes: payloads.totalBytes, seconds: seconds),
            .value("raw", "upload", "peak_rss_mib_\(mode)", peak, fields: [("start_mib", format(start, 1))]),
            .value("raw", "upload", "cpu_us_per_request_\(mode)", cpu * 1e6 / Double(bodies.count)),
        ]
    }

    /// The second reference: a plain URLSession loop (``URLSessionLoop``), printed as a row of its
    /// own (peer `beacon`, mode `ref_urlsession_loop_…`: it is not Beacon) against the keep-alive loop.
    static func urlSessionLoop(_ payloads: UploadEvents, _ collector: BenchCollector, batch: Int, mode: String) throws -> [Figure] {
        let n = payloads.count
        let bodies = payloads.repeated(URLSessionLoop.bodies(payloads.events, batch: batch, gzip: false))
        let before = try collector.stats()
        let cpuBefore = Memory.cpuSeconds
        let seconds = try URLSessionLoop.run(bodies, to: collector.url, gzip: false)
        let cpu = Memory.cpuSeconds - cpuBefore
        if let before, let after = try collector.stats(), after.events - before.events != n {
            throw BenchFailure("upload \(mode): the collector accepted \(after.events - before.events) of \(n) events")
        }
        return [
            .throughput("beacon", "upload", mode, n: n, bytes: payloads.totalBytes, seconds: seconds),
            .value("beacon", "upload", "cpu_us_per_request_\(mode)", cpu * 1e6 / Double(bodies.count)),
        ]
    }
}

/// The events one upload mode sends: the workload's generated events, `repeats` times over, so
/// that every mode makes about 2,000 requests (batch 500 sends the 100,000 events ten times).
/// At 100,000 events batch 500 made 200 requests in about 30 ms, where the connection's start,
/// the first reads and the last durable acknowledgement weighed so much that one round's ratio
/// to the raw loop swung from 0.36 to 0.77. Repeating keeps the payloads' memory (and the peak
/// RSS figures) that of 100,000 events: the repeated bodies share their storage.
struct UploadEvents {
    let events: [[UInt8]]
    let repeats: Int
    /// Payload bytes of one pass over `events`.
    private let bytesOnce: Int

    init(_ payloads: Payloads, batch: Int, quick: Bool) {
        events = payloads.events
        bytesOnce = payloads.totalBytes
        repeats = quick ? 1 : max(1, 2_000 * batch / max(1, payloads.events.count))
    }

    /// Events sent in all.
    var count: Int { events.count * repeats }
    /// Payload bytes sent in all (MB/s is computed from this).
    var totalBytes: Int { bytesOnce * repeats }

    /// `bodies` (one pass's requests) `repeats` times over, sharing their storage.
    func repeated<Body>(_ bodies: [Body]) -> [Body] {
        (0..<repeats).flatMap { _ in bodies }
    }
}

/// Runs `body` on the concurrency pool and waits for it on this thread.
func blockOn<T: Sendable>(_ body: @escaping @Sendable () async -> T) -> T {
    let done = DispatchSemaphore(value: 0)
    let box = ResultBox<T>()
    Task {
        box.value = await body()
        done.signal()
    }
    done.wait()
    return box.value!
}

/// Carries a value from a task to the waiting thread (the semaphore orders the accesses).
final class ResultBox<T>: @unchecked Sendable {
    var value: T?
}

/// A transport that answers every request 200 at once.
struct InstantTransport: Transport {
    func send(_ request: TransportRequest) async throws -> TransportResponse {
        TransportResponse(status: 200)
    }
}
