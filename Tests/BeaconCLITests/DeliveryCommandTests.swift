import BeaconTestSupport
import Foundation
import Glibc
import Testing
import BeaconTestTraits

/// A free TCP port on 127.0.0.1 (bound to port 0, read back, closed).
func freePort() -> Int {
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    _ = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) } }
    return Int(UInt16(bigEndian: address.sin_port))
}

/// `beacon collect` running on a free port, writing to `out`. A port free a moment ago can be
/// taken by another test's server before `collect` binds it (a full run at load 20 once never
/// saw it listen): when `collect` exits instead of listening, another port is tried. Ready once
/// `collect` itself says it listens: that something accepts connections on the port may be
/// another test's server, which took it while `collect` was starting.
func startCollector(out: String, status: Int? = nil) throws -> (RunningTool, String) {
    var exits: [String] = []
    for _ in 0..<5 {
        let port = freePort()
        var arguments = ["collect", "--port", String(port), "--out", out]
        if let status { arguments += ["--status", String(status)] }
        let tool = try RunningTool(arguments)
        let url = "http://127.0.0.1:\(port)/events"
        _ = eventually { tool.stderrSoFar.contains("listening on \(url)") || !tool.process.isRunning }
        if tool.process.isRunning && tool.stderrSoFar.contains("listening on \(url)") { return (tool, url) }
        let ended = tool.signal(SIGKILL)
        exits.append("port \(port): status \(ended.status): \(ended.stderr)")
    }
    Issue.record("beacon collect never listened: \(exits)")
    throw ChildError("beacon collect never listened: \(exits)")
}

func lines(of path: String) -> [String] {
    String(decoding: fileContents(atPath: path) ?? Data(), as: UTF8.self).split(separator: "\n").map(String.init)
}

@Suite("beacon send and beacon collect", .serialized, .blocking)
struct DeliveryCommandTests {
    @Test("send drains a directory to collect in every format, with and without gzip, through each transport", arguments: [
        ("array", false, "auto"), ("array", true, "socket"), ("envelope", false, "urlsession"),
        ("envelope", true, "auto"), ("ndjson", false, "socket"), ("ndjson", true, "urlsession"),
    ])
    func sendToCollect(format: String, gzip: Bool, transport: String) throws {
        try withTemporaryDirectory { dir in
            let out = dir + ".collected"
            defer { try? FileManager.default.removeItem(atPath: out) }
            let sent = events(130)
            #expect(try BeaconToolRunner.run(["append", dir], stdin: stdinData(sent)).status == 0)
            let (collector, url) = try startCollector(out: out)
            var arguments = ["send", dir, "--url", url + "?password=s3cret", "--batch", "40", "--format", format, "--header", "Authorization: Bearer secret-token", "--transport", transport]
            if gzip { arguments.append("--gzip") }
            let result = try BeaconToolRunner.run(arguments)
            #expect(result.status == 0, "\(result.stderr)")
            #expect(result.stderr.contains("sent 130 events"))
            #expect(!result.stderr.contains("secret-token") && !result.stderr.contains("s3cret"))
            let stopped = collector.signal(SIGTERM)
            #expect(stopped.status == 0)
            // 130 events pending, more than one --batch: one catch-up request of up to 1 MiB (the default).
            #expect(stopped.stderr.contains("1 accepted with 130 events"), "\(stopped.stderr)")
            #expect(lines(of: out) == sent, "the stored bytes, in order")
            #expect(try statusJSON(dir)["pending_records"] as? Int == 0)
            // Nothing left: a second send sends nothing and succeeds.
            #expect(try BeaconToolRunner.run(["send", dir, "--url", url]).status == 0)
        }
    }

    @Test("a collector that refuses the configuration (401) stops send with 74; everything stays pending")
    func configurationProblem() throws {
        try withTemporaryDirectory { dir in
            let out = dir + ".collected"
            defer { try? FileManager.default.removeItem(atPath: out) }
            #expect(try BeaconToolRunner.run(["append", dir], stdin: stdinData(events(10))).status == 0)
            let (collector, url) = try startCollector(out: out, status: 401)
            let result = try BeaconToolRunner.run(["send", dir, "--url", url])
            _ = collector.signal(SIGINT)
            #expect(result.status == 74)
            #expect(result.stderr.contains("401"))
            #expect(try statusJSON(dir)["pending_records"] as? Int == 10)
            #expect(lines(of: out).isEmpty)
        }
    }

    @Test("a collector that keeps failing (503) makes send give up after --retries with 74")
    func transientGivesUp() throws {
        try withTemporaryDirectory { dir in
            let out = dir + ".collected"
            defer { try? FileManager.default.removeItem(atPath: out) }
            #expect(try BeaconToolRunner.run(["append", dir], stdin: stdinData(events(3))).status == 0)
            let (collector, url) = try startCollector(out: out, status: 503)
            let result = try BeaconToolRunner.run(["send", dir, "--url", url, "--retries", "1"])
            let stopped = collector.signal(SIGTERM)
            #expect(result.status == 74)
            #expect(result.stderr.contains("3 stay pending"), "\(result.stderr)")
            #expect(stopped.stderr.contains("2 requests, 0 accepted"), "\(stopped.stderr)")
        }
    }

    @Test("send --follow ships events appended while it runs, and stops cleanly on SIGTERM")
    func follow() throws {
        try withTemporaryDirectory { dir in
            let out = dir + ".collected"
            defer { try? FileManager.default.removeItem(atPath: out) }
            #expect(try BeaconToolRunner.run(["append", dir], stdin: stdinData(events(5))).status == 0)
            let (collector, url) = try startCollector(out: out)
            let sender = try RunningTool(["send", dir, "--url", url, "--follow"])
            #expect(eventually { lines(of: out).count == 5 })
            #expect(try BeaconToolRunner.run(["append", dir], stdin: stdinData(events(7, from: 5))).status == 0)
            #expect(eventually { lines(of: out).count == 12 })
            let stopped = sender.signal(SIGTERM)
            _ = collector.signal(SIGTERM)
            #expect(stopped.status == 0, "\(stopped.stderr)")
            #expect(lines(of: out) == events(12))
        }
    }

    @Test("usage errors exit 64", arguments: [
        ["send"], ["send", "/tmp/x"], ["send", "/tmp/x", "--url", "ftp://h/"], ["send", "/tmp/x", "--url", "http://h/", "--format", "xml"],
        ["send", "/tmp/x", "--url", "http://h/", "--header", "NoColon"], ["send", "/tmp/x", "--url", "http://h/", "--batch", "0"],
        ["send", "/tmp/x", "--url", "https://h/", "--transport", "urlsession", "--cacert", "/etc/hostname"], ["send", "/tmp/x", "--url", "http://h/", "--transport", "curl"],
        ["send", "/tmp/x", "--url", "https://h/", "--cacert", "/nonexistent/ca.pem"], ["send", "/tmp/x", "--url", "https://h/", "--cert", "/etc/hostname"],
        ["send", "/tmp/x", "--url", "https://h/", "--cacert", "/etc/hostname"],
        ["collect", "--port", "70000"], ["collect", "--status", "42"], ["collect", "extra"],
    ])
    func usage(arguments: [String]) throws {
        let result = try BeaconToolRunner.run(arguments)
        #expect(result.status == 64, "\(arguments): \(result.stderr)")
    }
}
