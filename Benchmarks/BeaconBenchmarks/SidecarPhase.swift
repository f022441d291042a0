import BeaconLog
import BeaconTestSupport
import Foundation
import Glibc

/// Sidecar: Beacon as two processes next to a service, the way a peer shipper runs. `beacon send
/// DIR --url NGINX --batch N --follow` starts first; then `beacon append DIR` reads the workload's
/// events (one per line) from a file on its standard input, with its default group commit. Timed
/// from the start of `append` to the checkpoint passing the last event (read from the checkpoint
/// file); CPU is both processes' (user + system, from `wait4`) per 100k events. Needs nginx and
/// the `beacon` executable next to this benchmark (`swift build -c release --product beacon`);
/// skipped, with a line saying why, without them.
enum SidecarPhase: BenchPhase {
    static let name = "sidecar"
    static let summary = "beacon append | beacon send --follow as separate processes into nginx, batch 50/500; CPU per 100k events"

    static func runRound(_ context: BenchContext) throws -> [Figure] {
        let beacon = builtProductPath("beacon")
        guard FileManager.default.isExecutableFile(atPath: beacon) else {
            FileHandle.standardError.write(Data("beacon-bench: SKIPPED sidecar: no \(beacon); build it with `swift build -c release --product beacon`\n".utf8))
            return []
        }
        guard BenchCollector.nginxPath != nil else {
            FileHandle.standardError.write(Data("beacon-bench: SKIPPED sidecar: nginx is not installed\n".utf8))
            return []
        }
        let n = context.quick ? 10_000 : 100_000
        let payloads = context.payloads(n)
        let input = try context.scratch("beacon-sidecar-input") + "/events.jsonl"
        var text: [UInt8] = []
        text.reserveCapacity(payloads.totalBytes + n)
        for event in payloads.events { text += event; text.append(0x0A) }
        try Data(text).write(to: URL(fileURLWithPath: input))
        text = []
        let collector = try BenchCollector(.nginx, directory: try context.scratch("beacon-nginx"))
        defer { collector.stop() }
        var figures: [Figure] = []
        for batch in [50, 500] {
            let mode = "nginx_batch\(batch)"
            let dir = try context.scratch("beacon-sidecar-\(batch)")
            defer { try? FileManager.default.removeItem(atPath: dir) }
            let send = try spawn(beacon, ["send", dir, "--url", collector.url.absoluteString, "--batch", String(batch), "--follow"], stdin: "/dev/null")
            usleep(100_000)  // its log is open and waiting before the events come
            let start = now()
            let append = try spawn(beacon, ["append", dir], stdin: input)
            let appendUsage = try reap(append, what: "beacon append")
            let end = now() + 300
            while checkpointSeq(dir) < UInt64(n) {
                guard now() < end else {
                    send.signal(SIGKILL)
                    _ = try? reap(send, what: "beacon send")
                    throw BenchFailure("sidecar \(mode): beacon send did not acknowledge \(n) events within 300 s")
                }
                usleep(2000)
            }
            let seconds = now() - start
            send.signal(SIGTERM)
            let sendUsage = try reap(send, what: "beacon send", signalled: true)
            figures.append(.throughput("beacon", "sidecar", mode, n: n, bytes: payloads.totalBytes, seconds: seconds))
            figures.append(.value("beacon", "sidecar", "cpu_s_per_100k_events_\(mode)", (appendUsage + sendUsage) * 100_000 / Double(n),
                                  fields: [("append_s", format(appendUsage * 100_000 / Double(n), 3)), ("send_s", format(sendUsage * 100_000 / Double(n), 3))]))
        }
        return figures
    }

    /// The seq the checkpoint file of `dir` names (0 without one).
    static func checkpointSeq(_ dir: String) -> UInt64 {
        guard let data = FileManager.default.contents(atPath: dir + "/" + Checkpoint.fileName) else { return 0 }
        return Checkpoint.decode(file: [UInt8](data)).checkpoint?.position.seq ?? 0
    }

    /// Starts `path` with `arguments`, its stdin read from the file `stdin`, its stdout to /dev/null
    /// (``SpawnedProcess``, as the tests start their children).
    static func spawn(_ path: String, _ arguments: [String], stdin: String) throws -> SpawnedProcess {
        do {
            return try SpawnedProcess(path, arguments, stdin: .file(stdin), stdout: .null)
        } catch {
            throw BenchFailure("\(error)")
        }
    }

    /// Waits for `process`; its CPU seconds (user + system). Throws unless it exited 0 (or, when
    /// `signalled`, ended by the SIGTERM sent to it).
    static func reap(_ process: SpawnedProcess, what: String, signalled: Bool = false) throws -> Double {
        let ending = process.wait()
        switch ending {
        case .exited(0): break
        case .exited(128 + SIGTERM) where signalled, .signalled where signalled: break
        default: throw BenchFailure("\(what) \(ending)")
        }
        return process.cpuSeconds ?? 0
    }
}
