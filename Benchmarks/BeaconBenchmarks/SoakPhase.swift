import Beacon
import Foundation
import Glibc
import BeaconURLSession

/// Soak (run only when named, `--phase soak`): an embedded tracker with the default delivery
/// settings and the real `HTTPTransport` uploading to the loopback collector in a child process
/// for minutes, and whether this process's resident memory stays flat meanwhile.
///
/// Steady: `Beacon.track` of the workload's event paced at `--soak-rate` events/s for
/// `--soak-seconds`, this process's RSS and the malloc heap in use sampled every second. Figures:
/// RSS after the warm-up (30 s, or a third of a shorter run), the peak (sampled every 2 ms), at
/// the end, and the least-squares slope in MiB/min over the samples after the warm-up; events
/// tracked, delivered and still pending when tracking stops. Then the tail is flushed and every
/// event is checked at the collector.
///
/// Backlog: `--soak-backlog` events tracked as fast as `track` takes them while the uploader
/// sends, until the collector has them all; the RSS before, the peak, and after the drain (5 s
/// later, and after `malloc_trim(0)`, which tells memory still in use from freed memory the
/// allocator keeps).
///
/// Raw: the heap's growth per request of a plain URLSession loop to the same collector, beside
/// the tracker's growth per request during the steady part: equal figures put the growth in the
/// HTTP client.
enum SoakPhase: BenchPhase {
    static let name = "soak"
    static let summary = "(only when named) tracker uploading at a paced rate for minutes: RSS every second, slope; then a backlog drained"

    static func runRound(_ context: BenchContext) throws -> [Figure] {
        let options = context.soak.resolved(quick: context.quick)
        let collector = try BenchCollector(.loopback, directory: context.directory)
        defer { collector.stop() }
        var config = Beacon.Configuration(directory: try context.scratch("beacon-soak"), serverURL: collector.url)
        config.lifecycleEvents = false
        config.backpressure = .blockCallingThread(timeout: .seconds(30))   // the backlog is tracked flat out on this thread
        switch options.transport {
        case "socket": config.transport = SocketTransport()
        case "urlsession": config.transport = HTTPTransport()
        default: break  // the library's default
        }
        let beacon = try Beacon(configuration: config)
        defer { _ = blockOn { await beacon.shutdown(timeout: .seconds(5)) } }
        let startMiB = Memory.currentMiB
        progress("soak (\(options.transport)): \(grouped(Double(options.rate))) events/s for \(format(options.seconds, 0)) s (warm-up \(format(options.warmup, 0)) s), then a backlog of \(grouped(Double(options.backlog))); RSS \(format(startMiB, 1)) MiB")
        var figures = try steady(beacon, collector, options)
        figures += try backlog(beacon, collector, options)
        figures += try raw(collector, requests: options.rawRequests)
        return figures
    }

    // MARK: Steady

    static func steady(_ beacon: Beacon, _ collector: BenchCollector, _ options: SoakOptions.Resolved) throws -> [Figure] {
        let users = (0..<1000).map { "user-\($0)" }
        var trace = MemoryTrace()
        let peakSampler = PeakSampler()
        let cpuBefore = TrackPhase.processCPUSeconds()
        let requestsBefore = beacon.deliveryStats.sentRequests
        let start = now()
        var tracked = 0
        var nextSample = 0.0
        var nextProgress = 10.0
        while true {
            let t = now() - start
            if t >= nextSample {
                trace.sample(at: t)
                nextSample = floor(t) + 1
                if t >= nextProgress {
                    let delivered = try collector.stats()?.events ?? 0
                    progress("soak steady \(format(t, 0)) s: tracked \(grouped(Double(tracked))), delivered \(grouped(Double(delivered))), \(trace.last)")
                    nextProgress += 10
                }
            }
            if t >= options.seconds { break }
            // Paced: every event due by now, then a millisecond's pause (a burst after a stall).
            let due = Int(t * Double(options.rate))
            while tracked < due {
                beacon.track("Purchase", properties: ["price": 9.99, "item": "book", "count": 3, "vip": true], distinctId: users[tracked % 1000])
                tracked += 1
            }
            usleep(1000)
        }
        let seconds = now() - start
        let peak = peakSampler.stop()
        let cpu = TrackPhase.processCPUSeconds() - cpuBefore
        let deliveredAtEnd = try collector.stats()?.events ?? 0
        let statsAtEnd = beacon.deliveryStats
        let pendingAtEnd = statsAtEnd.pendingEvents
        let requestsPerSecond = Double(statsAtEnd.sentRequests - requestsBefore) / seconds
        let expected = try drain(beacon, collector, timeout: 600)
        let warm = trace.samples.filter { $0.t >= options.warmup }
        guard let atWarmup = warm.first, let atEnd = trace.samples.last else {
            throw BenchFailure("soak: no RSS samples after the warm-up (\(format(options.warmup, 0)) s of \(format(seconds, 0)) s)")
        }
        let rssSlope = MemoryTrace.slopePerMinute(warm.map { ($0.t, $0.rssMiB) })
        let heapSlope = MemoryTrace.slopePerMinute(warm.map { ($0.t, $0.heapMiB) })
        let rssRange = (warm.map(\.rssMiB).min() ?? .nan, warm.map(\.rssMiB).max() ?? .nan)
        progress("soak steady: done in \(format(seconds, 1)) s; RSS after warm-up \(format(atWarmup.rssMiB, 1)) MiB, end \(format(atEnd.rssMiB, 1)) MiB, slope \(format(rssSlope, 2)) MiB/min")
        let window = [("from_s", format(options.warmup, 0)), ("to_s", format(seconds, 0)), ("samples", String(warm.count))]
        return [
            .value("beacon", "soak", "steady_pending_at_end", Double(pendingAtEnd), fields: [
                ("rate", String(options.rate)), ("seconds", format(seconds, 0)), ("tracked", String(tracked)),
                ("delivered_at_end", String(deliveredAtEnd)), ("delivered_after_flush", String(expected)),
            ]),
            .value("beacon", "soak", "steady_delivered_per_s", Double(deliveredAtEnd) / seconds, fields: [("tracked_per_s", format(Double(tracked) / seconds, 0))]),
            .value("beacon", "soak", "steady_cpu_us_per_event", cpu / Double(max(tracked, 1)) * 1e6, fields: [("cpu_s", format(cpu, 1))]),
            .value("beacon", "soak", "steady_rss_after_warmup_mib", atWarmup.rssMiB, fields: [("at_s", format(atWarmup.t, 0))]),
            .value("beacon", "soak", "steady_rss_peak_mib", peak),
            .value("beacon", "soak", "steady_rss_end_mib", atEnd.rssMiB, fields: [("at_s", format(atEnd.t, 0)), ("min_after_warmup", format(rssRange.0, 1)), ("max_after_warmup", format(rssRange.1, 1))]),
            .value("beacon", "soak", "steady_rss_slope_mib_per_min", rssSlope, fields: window),
            .value("beacon", "soak", "steady_heap_slope_mib_per_min", heapSlope, fields: window + [("heap_after_warmup_mib", format(atWarmup.heapMiB, 1)), ("heap_end_mib", format(atEnd.heapMiB, 1))]),
            .value("beacon", "soak", "steady_heap_growth_bytes_per_request", heapSlope * 1_048_576 / 60 / requestsPerSecond, fields: [("requests_per_s", format(requestsPerSecond, 1))]),
        ]
    }

    // MARK: Backlog

    static func backlog(_ beacon: Beacon, _ collector: BenchCollector, _ options: SoakOptions.Resolved) throws -> [Figure] {
        guard options.backlog > 0 else { return [] }
        let users = (0..<1000).map { "user-\($0)" }
        let baseline = MemoryTrace.now()
        let before = try collector.stats()?.events ?? 0
        let peakSampler = PeakSampler()
        let start = now()
        for i in 0..<options.backlog {
            beacon.track("Purchase", properties: ["price": 9.99, "item": "book", "count": 3, "vip": true], distinctId: users[i % 1000])
        }
        let trackedSeconds = now() - start
        progress("soak backlog: \(grouped(Double(options.backlog))) tracked in \(format(trackedSeconds, 1)) s; draining")
        let delivered = try drain(beacon, collector, timeout: 600) - before
        let drainSeconds = now() - start
        let peak = peakSampler.stop()
        // Idle for 5 s (the uploader's timers and the allocator settle), then what malloc still
        // holds for live objects versus freed memory it has not given back.
        usleep(5_000_000)
        let settled = MemoryTrace.now()
        Allocator.trim()
        let trimmed = MemoryTrace.now()
        progress("soak backlog: drained in \(format(drainSeconds, 1)) s; RSS \(format(baseline.rssMiB, 1)) -> peak \(format(peak, 1)) -> \(format(settled.rssMiB, 1)) MiB (\(format(trimmed.rssMiB, 1)) after malloc_trim)")
        return [
            .value("beacon", "soak", "backlog_drain_s", drainSeconds, fields: [
                ("n", String(options.backlog)), ("delivered", String(delivered)), ("track_s", format(trackedSeconds, 1)),
                ("delivered_per_s", format(Double(delivered) / drainSeconds, 0)),
            ]),
            .value("beacon", "soak", "backlog_rss_baseline_mib", baseline.rssMiB, fields: [("heap_mib", format(baseline.heapMiB, 1))]),
            .value("beacon", "soak", "backlog_rss_peak_mib", peak),
            .value("beacon", "soak", "backlog_rss_drained_mib", settled.rssMiB, fields: [
                ("over_baseline_mib", format(settled.rssMiB - baseline.rssMiB, 1)), ("heap_mib", format(settled.heapMiB, 1)),
            ]),
            .value("beacon", "soak", "backlog_rss_trimmed_mib", trimmed.rssMiB, fields: [("over_baseline_mib", format(trimmed.rssMiB - baseline.rssMiB, 1))]),
        ]
    }

    // MARK: Raw

    /// The same growth measured without Beacon: `requests` POSTs of 50 workload events by a plain
    /// URLSession loop (one in flight, the transport's session settings) to the same collector,
    /// and the malloc heap's growth per request. Equal to Beacon's per-request growth, the
    /// growth is the HTTP client's.
    static func raw(_ collector: BenchCollector, requests: Int) throws -> [Figure] {
        guard requests > 0 else { return [] }
        let body = URLSessionLoop.bodies(Payloads(count: 50).events, batch: 50, gzip: false)[0]
        // A short run first, so that the session's one-time allocations are not counted.
        _ = try URLSessionLoop.run(Array(repeating: body, count: 100), to: collector.url, gzip: false)
        let before = MemoryTrace.now()
        let seconds = try URLSessionLoop.run(Array(repeating: body, count: requests), to: collector.url, gzip: false)
        let after = MemoryTrace.now()
        let perRequest = (after.heapMiB - before.heapMiB) * 1_048_576 / Double(requests)
        progress("soak raw: \(grouped(Double(requests))) URLSession requests in \(format(seconds, 1)) s; heap \(format(before.heapMiB, 1)) -> \(format(after.heapMiB, 1)) MiB, \(format(perRequest, 0)) B/request")
        return [
            .value("raw", "soak", "raw_heap_growth_bytes_per_request", perRequest, fields: [
                ("requests", String(requests)), ("heap_before_mib", format(before.heapMiB, 1)), ("heap_after_mib", format(after.heapMiB, 1)),
                ("rss_before_mib", format(before.rssMiB, 1)), ("rss_after_mib", format(after.rssMiB, 1)),
            ]),
        ]
    }

    /// Waits until the collector holds every event the tracker accepted (its drops excepted),
    /// flushing the tail below the count trigger as an application would; the collector's count.
    static func drain(_ beacon: Beacon, _ collector: BenchCollector, timeout: Double) throws -> Int {
        let stats = beacon.stats
        let expected = Int(stats.tracked - stats.droppedTotal)
        if stats.droppedTotal > 0 { progress("soak: the tracker dropped \(stats.dropped)") }
        try collector.waitForEvents(expected - 100, timeout: timeout)
        let result = blockOn { await beacon.flush(timeout: .seconds(60)) }
        try collector.waitForEvents(expected, timeout: 60)
        guard let accepted = try collector.stats()?.events, accepted == expected else {
            throw BenchFailure("soak: the collector accepted \(String(describing: try? collector.stats())) of \(expected) events (last flush: \(result))")
        }
        return accepted
    }

    static func progress(_ line: String) {
        FileHandle.standardError.write(Data((line + "\n").utf8))
    }
}

/// The soak's settings: `--soak-seconds`, `--soak-rate`, `--soak-backlog` (nil: the default, or
/// the smoke size under `--quick`: 8 s at 5,000 events/s and a 20,000-event backlog), and the
/// requests of the URLSession loop that follows (20,000; 1,000 under `--quick`).
struct SoakOptions {
    var seconds: Double?
    var rate: Int?
    var backlog: Int?
    /// `--soak-transport`: the tracker's transport, `default` (the library's default), `urlsession` or `socket`.
    var transport = "default"

    struct Resolved {
        var seconds: Double
        var rate: Int
        var backlog: Int
        var rawRequests: Int
        var transport = "default"
        /// Samples before this many seconds are the warm-up: 30 s, or a third of a shorter run.
        var warmup: Double { min(30, seconds / 3) }
    }

    func resolved(quick: Bool) -> Resolved {
        Resolved(seconds: seconds ?? (quick ? 8 : 180), rate: rate ?? (quick ? 5000 : 20_000), backlog: backlog ?? (quick ? 20_000 : 500_000), rawRequests: quick ? 1000 : 20_000, transport: transport)
    }
}

/// This process's resident memory and the malloc heap in use, sampled with their time.
struct MemoryTrace {
    struct Sample {
        var t: Double
        /// Resident set size (`VmRSS`), MiB.
        var rssMiB: Double
        /// Bytes malloc has handed out and not had back (every arena, mmapped blocks included),
        /// MiB: grows only with live objects, unlike RSS, which also holds freed memory the
        /// allocator keeps.
        var heapMiB: Double
    }

    private(set) var samples: [Sample] = []

    mutating func sample(at t: Double) {
        var s = Self.now()
        s.t = t
        samples.append(s)
    }

    var last: String {
        guard let s = samples.last else { return "no sample" }
        return "RSS \(format(s.rssMiB, 1)) MiB, heap \(format(s.heapMiB, 1)) MiB"
    }

    static func now() -> Sample {
        Sample(t: 0, rssMiB: Memory.currentMiB, heapMiB: Allocator.inUseBytes().map { Double($0) / 1_048_576 } ?? .nan)
    }

    /// The least-squares slope of `points` (seconds, MiB), in MiB per minute.
    static func slopePerMinute(_ points: [(Double, Double)]) -> Double {
        guard points.count >= 2 else { return .nan }
        let n = Double(points.count)
        let meanX = points.map(\.0).reduce(0, +) / n
        let meanY = points.map(\.1).reduce(0, +) / n
        var covariance = 0.0
        var variance = 0.0
        for (x, y) in points {
            covariance += (x - meanX) * (y - meanY)
            variance += (x - meanX) * (x - meanX)
        }
        return variance > 0 ? covariance / variance * 60 : .nan
    }
}

/// glibc's allocator, reached through `dlsym` (Swift's Glibc module leaves out `<malloc.h>`).
enum Allocator {
    private typealias MallocInfo = @convention(c) (Int32, UnsafeMutablePointer<FILE>?) -> Int32
    private typealias MallocTrim = @convention(c) (Int) -> Int32

    /// Bytes in use: every arena's memory from the system less its free chunks, plus mmapped
    /// blocks, from the totals `malloc_info(3)` prints after its last arena. Nil if unavailable.
    static func inUseBytes() -> Int? {
        guard let symbol = dlsym(nil, "malloc_info") else { return nil }
        let mallocInfo = unsafeBitCast(symbol, to: MallocInfo.self)
        var buffer: UnsafeMutablePointer<CChar>?
        var length = 0
        guard let stream = open_memstream(&buffer, &length) else { return nil }
        let status = mallocInfo(0, stream)
        fclose(stream)
        defer { free(buffer) }
        guard status == 0, let buffer else { return nil }
        let xml = String(cString: buffer)
        guard let totals = xml.components(separatedBy: "</heap>").last else { return nil }
        func total(_ element: String, _ type: String) -> Int? {
            guard let range = totals.range(of: "<\(element) type=\"\(type)\"") else { return nil }
            let rest = totals[range.upperBound...]
            guard let open = rest.range(of: "size=\""), let close = rest[open.upperBound...].firstIndex(of: "\"") else { return nil }
            return Int(rest[open.upperBound..<close])
        }
        guard let system = total("system", "current"), let fast = total("total", "fast"), let rest = total("total", "rest"), let mmapped = total("total", "mmap") else { return nil }
        return system - fast - rest + mmapped
    }

    /// Gives freed memory back to the system (`malloc_trim(0)`).
    static func trim() {
        guard let symbol = dlsym(nil, "malloc_trim") else { return }
        _ = unsafeBitCast(symbol, to: MallocTrim.self)(0)
    }
}
