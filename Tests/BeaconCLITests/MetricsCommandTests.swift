import BeaconTesting
import BeaconLog
import BeaconTestSupport
import Foundation
import Glibc
import Synchronization
import Testing
import BeaconTestTraits

/// Issue 28: the lag in `beacon status`, and `beacon send --follow --metrics` scraped by
/// promtool and by a real Prometheus server (Debian's `prometheus`; skipped, loudly, without it).
@Suite("Metrics: status lag, send --metrics, promtool and Prometheus", .serialized, .blocking)
struct MetricsCommandTests {
    @Test("status shows the oldest pending event's age: by its time field, or since its segment was created; null when nothing is pending")
    func statusShowsLag() throws {
        try withTemporaryDirectory { dir in
            #expect(try BeaconToolRunner.run(["append", dir], stdin: stdinData(events(3))).status == 0)
            let json = try statusJSON(dir)
            let age = json["oldest_pending_age_seconds"] as? Double ?? -1
            // The events' time is 1_700_000_000_000 ms (November 2023): years old.
            let expected = Date().timeIntervalSince1970 - 1_700_000_000
            #expect(abs(age - expected) < 120, "age \(age), expected about \(expected)")
            #expect(json["oldest_pending_age_source"] as? String == "time")
            let text = try BeaconToolRunner.run(["status", dir])
            #expect(text.stdoutText.contains("oldest:        seq 0, "), "\(text.stdoutText)")
            #expect(text.stdoutText.contains("by its time field"))
        }
        try withTemporaryDirectory { dir in
            #expect(try BeaconToolRunner.run(["append", dir], stdin: stdinData([#"{"a":1}"#, #"{"b":2}"#])).status == 0)
            let json = try statusJSON(dir)
            if json["oldest_pending_age_source"] is NSNull {
                print("SKIPPED (partly): this file system records no birth time; a record without time has no age here")
            } else {
                #expect(json["oldest_pending_age_source"] as? String == "appended")
                let age = json["oldest_pending_age_seconds"] as? Double ?? -1
                #expect(age >= 0 && age < 600, "age \(age)")
            }
            // Delivered: nothing pending, no age.
            let collector = try LoopbackCollector()
            defer { collector.stop() }
            #expect(try BeaconToolRunner.run(["send", dir, "--url", collector.url.absoluteString]).status == 0)
            let after = try statusJSON(dir)
            #expect(after["oldest_pending_age_seconds"] is NSNull && after["pending_records"] as? Int == 0)
            #expect(try BeaconToolRunner.run(["status", dir]).stdoutText.contains("oldest:        nothing pending"))
        }
    }

    @Test("send --follow --metrics: Prometheus text and OpenMetrics pass promtool; pending and lag rise during an outage, fall after it; a Prometheus server scrapes it")
    func sendServesMetrics() async throws {
        // Its waits block (processes, polling): on a thread of its own, never one of the
        // concurrency pool's two, where they starved the suites beside it (their deadlines slipped).
        try await onOwnThread { try Self.sendServesMetricsBlocking() }
    }

    static func sendServesMetricsBlocking() throws {
        try withTemporaryDirectory { dir in
            #expect(try BeaconToolRunner.run(["append", dir], stdin: stdinData(events(20))).status == 0)
            let collector = try LoopbackCollector()
            defer { collector.stop() }
            collector.defaultReply = .status(503)
            let port = try freeLoopbackPort()
            let sender = try RunningTool(["send", dir, "--url", collector.url.absoluteString, "--follow", "--metrics", "127.0.0.1:\(port)", "--batch", "10"])
            defer { if sender.process.isRunning { sender.kill() } }
            #expect(eventually(within: 30) { (try? Self.scrape(port)) != nil }, "the metrics endpoint answers")
            #expect(eventually(within: 30) { collector.requests.count >= 1 }, "a request was tried")

            // The outage: pending and lag rise.
            let first = try Self.scrape(port)
            #expect(try BeaconToolRunner.run(["append", dir], stdin: stdinData(events(30, from: 20))).status == 0)
            // At least 1.1 s, so that the oldest event's age has grown, and until the sender has
            // seen the other process's appends and paused (a loaded machine takes longer than that).
            Thread.sleep(forTimeInterval: 1.1)
            var during = try Self.scrape(port)
            _ = eventually(within: 30) {
                guard let scraped = try? Self.scrape(port) else { return false }
                during = scraped
                return Self.value("beacon_pending_records", in: scraped.body) == 50 && Self.value("beacon_delivery_paused", in: scraped.body) == 1
            }
            print("--- scrape during the outage (Prometheus text) ---\n" + during.body)
            #expect(Self.value("beacon_pending_records", in: first.body) == 20)
            #expect(Self.value("beacon_pending_records", in: during.body) == 50)
            #expect((Self.value("beacon_oldest_pending_age_seconds", in: during.body) ?? 0) > (Self.value("beacon_oldest_pending_age_seconds", in: first.body) ?? .infinity))
            #expect((Self.value(#"beacon_answers_total{class="5xx"}"#, in: during.body) ?? 0) >= 1)
            #expect(Self.value("beacon_delivery_paused", in: during.body) == 1)
            #expect(during.contentType.hasPrefix("text/plain; version=0.0.4"))
            // The disk use follows the other process's appends too (it was the figure of the
            // sender's last listing of the directory).
            let diskBefore = Self.value("beacon_disk_bytes", in: first.body) ?? 0
            let diskDuring = Self.value("beacon_disk_bytes", in: during.body) ?? 0
            #expect(diskDuring > diskBefore, "beacon_disk_bytes \(diskBefore) -> \(diskDuring) after 30 more events")
            #expect(diskDuring >= (Self.value("beacon_pending_bytes", in: during.body) ?? .infinity))
            let openMetrics = try Self.scrape(port, accept: "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5")
            #expect(openMetrics.contentType.hasPrefix("application/openmetrics-text"))
            #expect(openMetrics.body.hasSuffix("# EOF\n"))
            #expect(openMetrics.body.contains("beacon_sent_events_total 0"))

            if let promtool = Self.tool("promtool") {
                // promtool (2.42) reads Prometheus' text format only; the OpenMetrics exposition is
                // parsed by the Prometheus server below, which asks for it first.
                for body in [first.body, during.body] {
                    let check = try Self.run(promtool, ["check", "metrics"], stdin: body)
                    #expect(check.status == 0, "promtool check metrics: \(check.output)")
                }
            } else {
                print("SKIPPED: promtool is not installed (apt-get install prometheus): the expositions were not validated by promtool")
            }

            // The collector is back: everything goes, pending and lag fall to zero.
            collector.defaultReply = .status(200)
            #expect(eventually(within: 60) { collector.acceptedEventCount >= 50 }, "delivered after the outage")
            #expect(eventually(within: 60) { (try? Self.scrape(port)).flatMap { Self.value("beacon_pending_records", in: $0.body) } == 0 })
            let after = try Self.scrape(port)
            print("--- scrape after the outage (Prometheus text) ---\n" + after.body)
            #expect(Self.value("beacon_oldest_pending_age_seconds", in: after.body) == 0)
            #expect(Self.value("beacon_sent_events_total", in: after.body) == 50)
            #expect(Self.value("beacon_delivery_paused", in: after.body) == 0)
            #expect((Self.value("beacon_last_success_timestamp_seconds", in: after.body) ?? 0) > Date().timeIntervalSince1970 - 120)

            #expect(try Self.run(Self.tool("promtool") ?? "/bin/true", ["check", "metrics"], stdin: after.body).status == 0)
            try prometheusScrapes(port)
            let stopped = sender.signal(SIGTERM)
            #expect(stopped.status == 0, "\(stopped.stderr)")
            // One paused and one resumed line, nothing more about the outage.
            let lines = stopped.stderr.split(separator: "\n")
            #expect(lines.filter { $0.contains(" paused since ") }.count == 1, "\(stopped.stderr)")
            #expect(lines.filter { $0.contains(" resumed after ") }.count == 1, "\(stopped.stderr)")
        }
    }

    @Test("--metrics refuses what is not HOST:PORT, and a port in use, with a message that says what to do")
    func badAddress() throws {
        try withTemporaryDirectory { dir in
            #expect(try BeaconToolRunner.run(["append", dir], stdin: stdinData(events(1))).status == 0)
            let bad = try BeaconToolRunner.run(["send", dir, "--url", "http://127.0.0.1:9/e", "--metrics", "localhost"])
            #expect(bad.status == 64 && bad.stderr.contains("HOST:PORT"), "\(bad.status) \(bad.stderr)")
            let server = try MetricsServer(address: "127.0.0.1:0") { _ in "" }
            defer { server.stop() }
            let busy = try BeaconToolRunner.run(["send", dir, "--url", "http://127.0.0.1:9/e", "--metrics", "127.0.0.1:\(server.port)"])
            #expect(busy.status == 64 && busy.stderr.contains("another process uses the port"), "\(busy.status) \(busy.stderr)")
        }
    }

    /// A Prometheus server on 127.0.0.1 with a private configuration and storage scrapes the
    /// endpoint through a ``ScrapeRecorder``: it asks for OpenMetrics first, is served OpenMetrics
    /// (the recorded `Content-Type`), parses it (`up == 1`) and the query `beacon_pending_records`
    /// answers. promtool (2.42) checks the text format only, so this is the OpenMetrics parser.
    /// Stopped (SIGTERM, then SIGKILL) before returning.
    static func prometheusScrapes(_ port: UInt16) throws {
        guard let prometheus = tool("prometheus") else {
            print("SKIPPED: the prometheus server is not installed (apt-get install prometheus): no real scrape was tested")
            return
        }
        let recorder = try ScrapeRecorder(forwardingTo: port)
        defer { recorder.stop() }
        // Its storage in memory (/dev/shm) when there is one: the TSDB's WAL writes and fsyncs
        // stalled the disk long enough for the suites running beside this one to miss their
        // real-time deadlines. One Go thread, at low priority, for the same reason.
        let base = FileManager.default.isWritableFile(atPath: "/dev/shm") ? URL(fileURLWithPath: "/dev/shm") : FileManager.default.temporaryDirectory
        let home = base.appendingPathComponent("beacon-prometheus-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: home + "/data", withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: home) }
        let config = """
            global:
              scrape_interval: 1s
              scrape_timeout: 1s
            scrape_configs:
              - job_name: beacon
                static_configs:
                  - targets: ['127.0.0.1:\(recorder.port)']
            """
        try config.write(toFile: home + "/prometheus.yml", atomically: true, encoding: .utf8)
        let webPort = try freeLoopbackPort()
        let log = home + "/prometheus.log"
        let process = try SpawnedProcess("/usr/bin/nice", ["-n", "10", prometheus, "--config.file=\(home)/prometheus.yml", "--storage.tsdb.path=\(home)/data",
                                                           "--web.listen-address=127.0.0.1:\(webPort)", "--log.level=warn", "--storage.tsdb.wal-segment-size=10MB"],
                                         environment: ["GOMAXPROCS": "1"], stdout: .null, stderr: .file(log))
        defer {
            process.signal(SIGTERM)
            process.wait(killingAfter: .seconds(10))
        }
        var answer = ""
        let answered = eventually(within: 60) {
            guard let body = try? httpGet(webPort, "/api/v1/query?query=beacon_pending_records").body else { return false }
            answer = body
            return body.contains(#""status":"success""#) && body.contains(#""__name__":"beacon_pending_records""#)
        }
        print("Prometheus query beacon_pending_records: \(answer)")
        #expect(answered, "Prometheus never answered the query with a sample: \(answer) \(String(decoding: fileContents(atPath: log) ?? Data(), as: UTF8.self).suffix(2000))")
        // The scrapes succeeded: Prometheus parsed what it was served (a parse error sets up to 0).
        var up = ""
        let upAnswered = eventually(within: 30) {
            guard let body = try? httpGet(webPort, "/api/v1/query?query=up").body else { return false }
            up = body
            return body.contains(#""status":"success""#) && body.contains(#""1"]"#)
        }
        #expect(upAnswered, "up is not 1: \(up) \(String(decoding: fileContents(atPath: log) ?? Data(), as: UTF8.self).suffix(2000))")
        let scrapes = recorder.scrapes
        print("Prometheus scrapes through the recorder: \(scrapes.count); the last asked \(scrapes.last?.accept ?? "-") and was served \(scrapes.last?.contentType ?? "-")")
        #expect(!scrapes.isEmpty)
        for scrape in scrapes {
            #expect(scrape.accept.hasPrefix("application/openmetrics-text"), "Prometheus asks for OpenMetrics first: \(scrape.accept)")
            #expect(scrape.status == 200 && scrape.contentType.hasPrefix("application/openmetrics-text; version=1.0.0"), "served as OpenMetrics: \(scrape.status) \(scrape.contentType)")
        }
    }

    static func tool(_ name: String) -> String? {
        ["/usr/bin/\(name)", "/usr/local/bin/\(name)", "/usr/sbin/\(name)"].first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    static func run(_ executable: String, _ arguments: [String], stdin: String) throws -> (status: Int32, output: String) {
        let (ending, output) = try SpawnedProcess.run(executable, arguments, stdin: Array(stdin.utf8))
        switch ending {
        case .exited(let status): return (status, output)
        case .signalled(let signal): return (128 + signal, output)
        }
    }

    static func scrape(_ port: UInt16, accept: String? = nil) throws -> (body: String, contentType: String) {
        let answer = try httpGet(port, "/metrics", accept: accept)
        guard answer.status == 200 else { throw CocoaError(.fileReadUnknown, userInfo: [NSDebugDescriptionErrorKey: "status \(answer.status)"]) }
        return (answer.body, answer.headers["content-type"] ?? "")
    }

    /// The value of the sample `name` (with its labels, as written) in an exposition.
    static func value(_ name: String, in body: String) -> Double? {
        for line in body.split(separator: "\n") where line.hasPrefix(name + " ") {
            return Double(line.dropFirst(name.count + 1))
        }
        return nil
    }
}

/// Runs blocking `body` on a new thread, not on the concurrency pool, and waits for it.
func onOwnThread<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        let thread = Thread { continuation.resume(with: Result { try body() }) }
        thread.start()
    }
}

/// A blocking `GET path` to 127.0.0.1:`port` (Connection: close).
func httpGet(_ port: UInt16, _ path: String, accept: String? = nil) throws -> (status: Int, headers: [String: String], body: String) {
    let request = "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\n\(accept.map { "Accept: \($0)\r\n" } ?? "")Connection: close\r\n\r\n"
    let data = try loopbackExchange(port, Array(request.utf8))
    let text = String(decoding: data, as: UTF8.self)
    guard let split = text.range(of: "\r\n\r\n") else { throw POSIXError(.EPROTO) }
    let headLines = text[..<split.lowerBound].split(separator: "\r\n")
    let status = headLines.first.flatMap { Int($0.split(separator: " ").dropFirst().first ?? "") } ?? 0
    var headers: [String: String] = [:]
    for line in headLines.dropFirst() {
        guard let colon = line.firstIndex(of: ":") else { continue }
        headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
    }
    return (status, headers, String(text[split.upperBound...]))
}

/// A forwarding HTTP/1.1 hop between a scraper and a metrics endpoint that records what each
/// scrape asked for (`Accept`) and was served (status, `Content-Type`): the real Prometheus server
/// says which format it parsed nowhere else. One connection per scrape (`Connection: close` both
/// ways); stopped by ``stop()``.
final class ScrapeRecorder: @unchecked Sendable {
    struct Scrape: Sendable {
        var accept: String
        var status: Int
        var contentType: String
    }

    let port: UInt16
    private let upstream: UInt16
    private let listener: Int32
    private let recorded = Mutex<[Scrape]>([])
    private let stopped = Mutex(false)

    /// Listens on a free loopback port and forwards every request to 127.0.0.1:`upstream`.
    init(forwardingTo upstream: UInt16) throws {
        self.upstream = upstream
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        guard fd >= 0 else { throw POSIXError(.EIO) }
        var address = loopbackAddress(0)
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard bound == 0, listen(fd, 16) == 0 else { close(fd); throw POSIXError(.EADDRINUSE) }
        var local = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &local) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
        listener = fd
        port = UInt16(bigEndian: local.sin_port)
        Thread { [self] in
            while !stopped.withLock({ $0 }) {
                let client = accept(listener, nil, nil)
                if client < 0 { if errno == EINTR { continue }; break }
                Thread { [self] in serve(client) }.start()
            }
        }.start()
    }

    /// The scrapes forwarded so far.
    var scrapes: [Scrape] { recorded.withLock { $0 } }

    func stop() {
        stopped.withLock { $0 = true }
        shutdown(listener, Int32(SHUT_RDWR))
        close(listener)
    }

    private func serve(_ client: Int32) {
        defer { close(client) }
        var timeout = timeval(tv_sec: 10, tv_usec: 0)
        setsockopt(client, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        // The request head (a GET has no body).
        var head = [UInt8]()
        var byte = [UInt8](repeating: 0, count: 4096)
        while !(head.count >= 4 && head.suffix(4).elementsEqual("\r\n\r\n".utf8)) {
            let n = recv(client, &byte, 1, 0)
            if n <= 0 { return }
            head.append(byte[0])
        }
        var lines = String(decoding: head, as: UTF8.self).components(separatedBy: "\r\n").filter { !$0.isEmpty }
        let accept = lines.first { $0.lowercased().hasPrefix("accept:") }.map { String($0.dropFirst(7)).trimmingCharacters(in: .whitespaces) } ?? ""
        lines.removeAll { $0.lowercased().hasPrefix("connection:") }
        lines.append("Connection: close")
        guard let answer = try? loopbackExchange(upstream, Array((lines.joined(separator: "\r\n") + "\r\n\r\n").utf8)) else { return }
        // Answered as received, but this hop closes the connection after it.
        guard let split = answer.firstRange(of: Array("\r\n\r\n".utf8)) else { return }
        var answerLines = String(decoding: answer[..<split.lowerBound], as: UTF8.self).components(separatedBy: "\r\n")
        let status = answerLines.first.flatMap { Int($0.split(separator: " ").dropFirst().first ?? "") } ?? 0
        let contentType = answerLines.first { $0.lowercased().hasPrefix("content-type:") }.map { String($0.dropFirst(13)).trimmingCharacters(in: .whitespaces) } ?? ""
        recorded.withLock { $0.append(Scrape(accept: accept, status: status, contentType: contentType)) }
        answerLines.removeAll { $0.lowercased().hasPrefix("connection:") }
        answerLines.append("Connection: close")
        let out = Array((answerLines.joined(separator: "\r\n") + "\r\n\r\n").utf8) + answer[split.upperBound...]
        var sent = 0
        while sent < out.count {
            let n = out[sent...].withUnsafeBytes { send(client, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
            if n <= 0 { return }
            sent += n
        }
    }
}

/// Sends `request` to 127.0.0.1:`port` and reads the answer until the server closes.
func loopbackExchange(_ port: UInt16, _ request: [UInt8]) throws -> [UInt8] {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    guard fd >= 0 else { throw POSIXError(.EIO) }
    defer { close(fd) }
    var timeout = timeval(tv_sec: 10, tv_usec: 0)
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
    var address = loopbackAddress(port)
    let connected = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
    guard connected == 0 else { throw POSIXError(.ECONNREFUSED) }
    _ = request.withUnsafeBytes { send(fd, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
    var data = [UInt8]()
    var buffer = [UInt8](repeating: 0, count: 65536)
    while true {
        let n = recv(fd, &buffer, buffer.count, 0)
        if n < 0 && errno == EINTR { continue }
        if n <= 0 { break }
        data += buffer[0..<n]
    }
    return data
}
