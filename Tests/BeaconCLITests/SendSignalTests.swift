import Foundation
import Glibc
import Testing
import BeaconTestSupport
import BeaconTestTraits

/// Issue 26: in 4-minute chaos runs `beacon send` "ended with signal 15 after SIGTERM" 3 times.
/// Each time the harness had sent SIGTERM 0.88-0.91 s after starting it, before the process had
/// installed its handler (the dynamic loader and the runtime start-up take that long on a loaded
/// machine): the default action ended it, as it ends any process then. Once the handler is in
/// place (`SigCgt` in `/proc/PID/status`), SIGTERM at any moment, once or twice in a row, stops
/// send cleanly with its documented status 0.
@Suite("beacon send: SIGTERM at any moment after start-up exits 0", .serialized, .blocking)
struct SendSignalTests {
    /// Whether `pid` has a handler for `signal` (the `SigCgt` mask of `/proc/PID/status`).
    static func catches(_ pid: Int32, _ signal: Int32) -> Bool {
        guard let text = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
              let line = text.split(separator: "\n").first(where: { $0.hasPrefix("SigCgt:") }),
              let mask = UInt64(line.dropFirst("SigCgt:".count).trimmingCharacters(in: .whitespaces), radix: 16)
        else { return false }
        return mask & (1 << UInt64(signal - 1)) != 0
    }

    enum Collector: String, CaseIterable { case answering, silent, closed }

    @Test("SIGTERM once or twice in a row, 0-400 ms after the handler is installed, while send delivers, waits for an answer, or backs off: exit 0, 'stopped by signal 15'",
          arguments: Collector.allCases, [1, 2])
    func terminatedAtRandomMoments(collector kind: Collector, signals: Int) throws {
        var generator = SystemRandomNumberGenerator()
        try withTemporaryDirectory { dir in
            #expect(try BeaconToolRunner.run(["append", dir], stdin: stdinData(events(2000))).status == 0)
            let silent = kind == .silent ? try SendFollowTests.SilentCollector() : nil
            defer { silent?.server.stop() }
            let answering = kind == .answering ? try ScriptedServer { connection, _ in
                while connection.readRequest() != nil { connection.answer(200) }
            } : nil
            defer { answering?.stop() }
            // A port nothing listens on: bound and never listening for the whole test, so that no
            // other test's server can take it (a port read back and closed could be).
            let refusing = try RefusingPort()
            defer { withExtendedLifetime(refusing) {} }
            let closedURL = refusing.url.absoluteString
            let url = silent?.url ?? answering.map { "http://127.0.0.1:\($0.port)/events" } ?? closedURL
            for round in 0..<4 {
                let err = dir + ".err"
                defer { try? FileManager.default.removeItem(atPath: err) }
                let sender = try SpawnedProcess(BeaconToolRunner.executable, ["send", dir, "--url", url, "--follow", "--batch", "5", "--catch-up-batch", "5"],
                                                stdout: .file("/dev/null"), stderr: .file(err))
                var ready = false
                for _ in 0..<6000 where sender.isRunning {
                    if Self.catches(sender.pid, SIGTERM) { ready = true; break }
                    usleep(10_000)
                }
                #expect(ready, "round \(round): send never installed its SIGTERM handler")
                let delay = UInt32.random(in: 0...400_000, using: &generator)
                usleep(delay)
                for _ in 0..<signals { sender.signal(SIGTERM) }
                let ending = sender.wait(killingAfter: .seconds(60))
                let stderr = String(decoding: fileContents(atPath: err) ?? Data(), as: UTF8.self)
                #expect(ending == .exited(0), "round \(round), \(kind), \(signals) SIGTERM \(delay / 1000) ms after start-up: \(ending); \(stderr.suffix(600))")
                #expect(stderr.contains("stopped by signal 15"), "round \(round): \(stderr.suffix(600))")
            }
        }
    }
}
