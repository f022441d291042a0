import Beacon
import BeaconTesting
import Foundation
import Glibc

/// Upload: a full log (the WORKLOAD events) delivered by the `Uploader` through `HTTPTransport`
/// (URLSession) to the `LoopbackCollector` on 127.0.0.1, for 50 and 500 events per request,
/// with and without gzip; timed from the first read to the last acknowledgement (each batch's
/// checkpoint made durable). Also the body bytes on the wire per event.
///
/// The collector runs in the same process and splits every body back into events, so it takes
/// part of the 2 cores: the figures are a lower bound for a remote collector.
enum UploadPhase: BenchPhase {
    static let name = "upload"
    static let summary = "full log -> loopback collector over HTTP, batch 50/500, plain/gzip; wire bytes per event"

    static func runRound(_ context: BenchContext) throws -> [Figure] {
        let n = context.quick ? 10_000 : 100_000
        let payloads = context.payloads(n)
        var figures: [Figure] = []
        for batch in [50, 500] {
            for gzip in [false, true] {
                let mode = "batch\(batch)" + (gzip ? "_gzip" : "")
                let dir = try context.scratch("beacon-upload-\(mode)")
                let log = try BeaconLog(configuration: {
                    var c = BeaconLog.Configuration(directory: dir)
                    c.durability = .none
                    c.maxBytes = 4 << 30
                    return c
                }())
                for event in payloads.events { try log.append(event) }
                try log.sync()
                let collector = try LoopbackCollector()
                collector.retainsBodies = false
                var config = DeliveryConfiguration(url: collector.url)
                config.batchSize = batch
                config.gzip = gzip
                config.flushInterval = nil
                let uploader = Uploader(log: log, configuration: config, diagnostics: { _ in })
                var result: FlushResult?
                let seconds = time {
                    result = blockOn { await uploader.flush() }
                }
                collector.stop()
                try log.close()
                guard let result, result.outcome.isComplete, collector.acceptedEventCount == n, result.sent == n else {
                    throw BenchFailure("upload \(mode): \(String(describing: result)), collector accepted \(collector.acceptedEventCount) of \(n)")
                }
                figures.append(.throughput("beacon", "upload", mode, n: n, bytes: payloads.totalBytes, seconds: seconds))
                figures.append(.value("beacon", "upload", "wire_bytes_per_event_\(mode)", Double(collector.receivedBodyBytes) / Double(n), fields: [("n", String(n))]))
            }
        }
        return figures
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
