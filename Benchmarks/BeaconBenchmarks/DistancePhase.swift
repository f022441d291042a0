import BeaconLog
import BeaconTestSupport
import BeaconTesting
import DelayProxy
import Foundation
import Glibc
import Synchronization

/// Distance: delivery to a collector far away (issue 27). A backlog (500k events; 20k with
/// `--quick`) drained by `beacon send DIR --url …` with default settings, through the delay proxy
/// (`DelayProxy`, in this process) at RTT 20 and 100 ms, in front of nginx (or Beacon's own
/// loopback collector when nginx is not installed, said loudly). Timed from the start of
/// `beacon send` to its exit (process start included); CPU per request is the process's (user +
/// system, `wait4`) over the requests the recording run counted.
///
/// Per RTT: events/s; the one-request-in-flight limit (events per request / RTT) and the ratio to
/// it; the window reached and the most requests seen in flight (`beacon send --metrics`, scraped
/// every 20 ms: `beacon_request_window`, `beacon_requests_in_flight`). One run per
/// RTT goes to a recording collector instead (in this process, behind the same proxy), which
/// checks that every event arrived exactly once and in order and counts the requests.
///
/// Resume: `beacon send --follow` delivering to a loopback collector that stops for 20 s (3 s with
/// `--quick`) while events keep coming, then comes back on the same port: the time from its return
/// to the first request it accepts.
enum DistancePhase: BenchPhase {
    static let name = "distance"
    static let usesPayloads = true
    static let summary = "beacon send of a backlog through a delay proxy (RTT 20/100 ms) into nginx, defaults; order check; resume after an outage"

    static func runRound(_ context: BenchContext) throws -> [Figure] {
        let beacon = builtProductPath("beacon")
        guard FileManager.default.isExecutableFile(atPath: beacon) else {
            FileHandle.standardError.write(Data("beacon-bench: SKIPPED distance: no \(beacon); build it with `swift build -c release --product beacon`\n".utf8))
            return []
        }
        let n = context.quick ? 20_000 : 500_000
        let payloads = Payloads(count: n)
        let kind: BenchCollector.Kind = BenchCollector.nginxPath == nil ? .loopback : .nginx
        if kind == .loopback {
            FileHandle.standardError.write(Data("beacon-bench: distance: NGINX IS NOT INSTALLED: the collector behind the proxy is Beacon's own loopback collector; figures do not compare with nginx's\n".utf8))
        }
        let collector = try BenchCollector(kind, directory: try context.scratch("beacon-distance-nginx"))
        defer { collector.stop() }
        var figures: [Figure] = []
        for rtt in [100, 20] {
            let mode = "\(kind == .nginx ? "nginx" : "loopback")_rtt\(rtt)"
            // The recording run: order, exactly once, requests.
            let recording = try recordedRun(beacon, payloads, rtt: rtt, context)
            // The timed run, into nginx.
            let dir = try backlog(payloads, context, name: "beacon-distance-\(rtt)")
            defer { try? FileManager.default.removeItem(atPath: dir) }
            let proxy = try DelayProxy(to: collector.port, oneWay: .microseconds(rtt * 500))
            defer { proxy.stop() }
            let metricsPort = try freeLoopbackPort()
            let start = now()
            let send = try SidecarPhase.spawn(beacon, ["send", dir, "--url", "http://127.0.0.1:\(proxy.port)/events", "--metrics", "127.0.0.1:\(metricsPort)"], stdin: "/dev/null")
            let scraper = WindowScraper(port: metricsPort)
            let cpu = try SidecarPhase.reap(send, what: "beacon send")
            let seconds = now() - start
            let (window, inFlight) = scraper.stop()
            guard SidecarPhase.checkpointSeq(dir) >= UInt64(n) else { throw BenchFailure("distance \(mode): beacon send exited with events pending") }
            let perRequest = Double(n) / Double(recording.requests)
            let limit = perRequest / (Double(rtt) / 1000)
            let rate = Double(n) / seconds
            figures.append(.throughput("beacon", "distance", mode, n: n, bytes: payloads.totalBytes, seconds: seconds))
            figures.append(.value("beacon", "distance", "ratio_to_one_in_flight_\(mode)", rate / limit, fields: [
                ("limit_events_per_s", grouped(limit)), ("events_per_request", format(perRequest, 0)), ("window_reached", String(window)), ("most_in_flight", String(inFlight)),
                ("cpu_ms_per_request", format(cpu * 1000 / Double(recording.requests), 2)),
                ("recorded", recording.verdict),
            ]))
        }
        let resume = try resumeAfterOutage(beacon, payloads, outage: context.quick ? 3 : 20, context)
        figures.append(.value("beacon", "distance", "resume_s_after_outage_send_follow", resume.seconds, fields: [("outage_s", format(resume.outage, 0))]))
        return figures
    }

    /// Scrapes `beacon send --metrics` every 20 ms on a thread of its own, keeping the largest
    /// window and requests in flight it saw.
    final class WindowScraper: Sendable {
        private let state = Mutex<(window: Int, inFlight: Int, stopped: Bool)>((0, 0, false))
        private let done = DispatchSemaphore(value: 0)

        init(port: UInt16) {
            let thread = Thread { [self] in
                while !state.withLock({ $0.stopped }) {
                    if let text = Self.get(port) {
                        let window = Self.gauge("beacon_request_window", in: text), inFlight = Self.gauge("beacon_requests_in_flight", in: text)
                        state.withLock { s in
                            s.window = max(s.window, window ?? 0)
                            s.inFlight = max(s.inFlight, inFlight ?? 0)
                        }
                    }
                    usleep(20_000)
                }
                done.signal()
            }
            thread.start()
        }

        /// The largest window and requests in flight seen.
        func stop() -> (window: Int, inFlight: Int) {
            state.withLock { $0.stopped = true }
            done.wait()
            return state.withLock { ($0.window, $0.inFlight) }
        }

        static func gauge(_ name: String, in text: String) -> Int? {
            text.split(separator: "\n").first { $0.hasPrefix(name + " ") }.flatMap { Double($0.split(separator: " ").last ?? "").map { Int($0) } }
        }

        /// `GET /metrics` from 127.0.0.1:`port` (nil when nothing answers).
        static func get(_ port: UInt16) -> String? {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard fd >= 0 else { return nil }
            defer { close(fd) }
            var address = BenchCollector.loopback(port)
            let connected = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
            guard connected == 0 else { return nil }
            let request = Array("GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".utf8)
            guard request.withUnsafeBytes({ send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }) == request.count else { return nil }
            var answer: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 16 << 10)
            while true {
                let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if n <= 0 { break }
                answer += buffer[..<n]
            }
            return String(decoding: answer, as: UTF8.self)
        }
    }

    /// A log holding the workload's events, closed (the page cache warm).
    static func backlog(_ payloads: Payloads, _ context: BenchContext, name: String) throws -> String {
        let dir = try context.scratch(name)
        var config = BeaconLog.Configuration(directory: dir)
        config.maxBytes = 4 << 30
        config.durability = .none
        let log = try BeaconLog(configuration: config)
        for event in payloads.events { try log.append(event) }
        try log.close()
        return dir
    }

    /// The backlog delivered by `beacon send` through the proxy to a collector in this process that
    /// records the `_track_id` of every event it accepts, in arrival order.
    static func recordedRun(_ beacon: String, _ payloads: Payloads, rtt: Int, _ context: BenchContext) throws -> (requests: Int, verdict: String) {
        let dir = try backlog(payloads, context, name: "beacon-distance-recorded")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let arrivals = Arrivals()
        let collector = try LoopbackCollector { request in arrivals.record(request) }
        defer { collector.stop() }
        collector.retainsBodies = false
        let proxy = try DelayProxy(to: collector.port, oneWay: .microseconds(rtt * 500))
        defer { proxy.stop() }
        let send = try SidecarPhase.spawn(beacon, ["send", dir, "--url", "http://127.0.0.1:\(proxy.port)/events"], stdin: "/dev/null")
        _ = try SidecarPhase.reap(send, what: "beacon send (recorded)")
        let (ids, requests) = arrivals.taken()
        let n = payloads.events.count
        guard ids == Array(0..<n) else {
            let seen = Set(ids)
            throw BenchFailure("distance rtt \(rtt): the recording collector got \(ids.count) events for \(n), \(seen.count) distinct, \(n - seen.intersection(0..<n).count) missing, first out of order at \(zip(ids, 0...).first { $0 != $1 }.map { "\($0.1)" } ?? "-")")
        }
        return (requests, "\(n) once, in order, \(requests) requests")
    }

    /// What the recording collector accepted.
    final class Arrivals: Sendable {
        private let state = Mutex<(ids: [Int], requests: Int)>(([], 0))

        func record(_ request: LoopbackCollector.Request) {
            guard let status = request.status, status / 100 == 2, let events = request.events else { return }
            let ids = events.map { trackID($0) }
            state.withLock { s in
                s.ids += ids
                s.requests += 1
            }
        }

        func taken() -> ([Int], Int) { state.withLock { ($0.ids, $0.requests) } }

        /// The `_track_id` of a workload event (-1 without one).
        func trackID(_ event: [UInt8]) -> Int {
            let key = Array(#""_track_id":"#.utf8)
            guard let at = event.indices.first(where: { event[$0...].starts(with: key) }) else { return -1 }
            var value = 0
            for byte in event[(at + key.count)...] {
                guard byte >= 0x30 && byte <= 0x39 else { break }
                value = value * 10 + Int(byte - 0x30)
            }
            return value
        }
    }

    /// `beacon send --follow` to a loopback collector that goes away for `outage` seconds while
    /// events keep coming and then comes back on the same port: seconds from its return to the
    /// first request it accepted.
    static func resumeAfterOutage(_ beacon: String, _ payloads: Payloads, outage: Double, _ context: BenchContext) throws -> (seconds: Double, outage: Double) {
        let dir = try context.scratch("beacon-distance-resume")
        defer { try? FileManager.default.removeItem(atPath: dir) }
        let input = try context.scratch("beacon-distance-resume-input") + "/events.jsonl"
        defer { try? FileManager.default.removeItem(atPath: input) }
        var text: [UInt8] = []
        for event in payloads.events.prefix(100) { text += event; text.append(0x0A) }
        try Data(text).write(to: URL(fileURLWithPath: input))
        func append() throws { _ = try SidecarPhase.reap(try SidecarPhase.spawn(beacon, ["append", dir], stdin: input), what: "beacon append") }
        try append()
        var first = LoopbackCollector?.none
        first = try LoopbackCollector()
        let port = first!.port
        let send = try SidecarPhase.spawn(beacon, ["send", dir, "--url", "http://127.0.0.1:\(port)/events", "--follow"], stdin: "/dev/null")
        defer {
            send.signal(SIGTERM)
            _ = try? SidecarPhase.reap(send, what: "beacon send --follow", signalled: true)
        }
        try waitUntil("the first 100 events delivered") { first!.acceptedEventCount >= 100 }
        first!.stop()
        first = nil
        let down = now()
        // Events keep coming during the outage: the sender fails (connection refused) and backs off.
        while now() - down < outage {
            try append()
            usleep(500_000)
        }
        let back = Mutex<Double?>(nil)
        let returned = now()
        let collector = try LoopbackCollector(port: port) { request in
            if request.status.map({ $0 / 100 == 2 }) == true { back.withLock { $0 = $0 ?? now() } }
        }
        defer { collector.stop() }
        try waitUntil("delivery resumed after the collector came back", timeout: 400) { back.withLock { $0 } != nil }
        return (back.withLock { $0! } - returned, outage)
    }

    static func waitUntil(_ what: String, timeout: Double = 60, _ condition: () -> Bool) throws {
        let end = now() + timeout
        while !condition() {
            guard now() < end else { throw BenchFailure("distance: not within \(Int(timeout)) s: \(what)") }
            usleep(1000)
        }
    }
}
