import Beacon
import Foundation
import Glibc
import Synchronization

/// The tracker in a child process (`beacon-chaos --tracker-child DIR URL START RATE`), which the
/// harness kills, stops and terminates: a `Beacon` delivering to URL (NDJSON, batches of 20, 2 s
/// request timeout, short backoff) that tracks events "Chaos" with property `cid` from START on,
/// RATE a second, in blocks of ten. Before a block it prints `block FIRST END` (the ids it may
/// track), after the block is durable (`sync()`) `durable LAST`. SIGTERM or SIGINT run the
/// termination handler (shutdown, 2 s grace); the child then prints `terminated` and exits 0.
///
/// `beacon-chaos --tracker-drain DIR URL` opens the same directory with a clean collector and
/// flushes until nothing is pending, then prints `drained SENT` (or `pending N` after 300 s).
enum TrackerChild {
    static func configuration(_ directory: String, _ url: URL) -> Beacon.Configuration {
        var config = Beacon.Configuration(directory: directory, serverURL: url)
        config.storage.segmentBytes = 64 * 1024
        config.lifecycleEvents = false
        config.backpressure = .blockCallingThread(timeout: .seconds(30))
        config.diagnostics = { diagnostic in FileHandle.standardError.write(Data("tracker: \(diagnostic.message)\n".utf8)) }
        var delivery = DeliveryConfiguration(url: url)
        delivery.batchSize = 20
        // 20 also while behind: the duplicate bound counts batches of at most 20 (maxBatch).
        delivery.catchUpBatchSize = 20
        delivery.maxRequestsInFlight = ChaosRun.window
        delivery.flushBulkSize = 20
        delivery.flushInterval = .seconds(5)
        delivery.format = .ndjson
        delivery.requestTimeout = .seconds(2)
        delivery.backoff = .init(initial: .milliseconds(50), maximum: .seconds(1))
        config.delivery = delivery
        return config
    }

    /// One line on standard output, with `write(2)`: a harness that is gone (a broken pipe) is
    /// no reason to crash.
    static func say(_ line: String) {
        let bytes = Array((line + "\n").utf8)
        _ = bytes.withUnsafeBytes { Glibc.write(1, $0.baseAddress, $0.count) }
    }

    static func run(_ arguments: [String]) -> Never {
        guard arguments.count == 4, let url = URL(string: arguments[1]), let start = UInt64(arguments[2]), let rate = Double(arguments[3]), rate > 0 else {
            FileHandle.standardError.write(Data("usage: beacon-chaos --tracker-child DIR URL START RATE\n".utf8))
            exit(64)
        }
        signal(SIGPIPE, SIG_IGN)
        let beacon: Beacon
        do {
            beacon = try Beacon(configuration: configuration(arguments[0], url))
        } catch {
            FileHandle.standardError.write(Data("beacon-chaos tracker: cannot open \(arguments[0]): \(error)\n".utf8))
            exit(70)
        }
        let terminated = Atomic<Bool>(false)
        beacon.installTerminationHandler(grace: .seconds(2)) { _, _ in
            terminated.store(true, ordering: .sequentiallyConsistent)
        }
        say("ready")
        let began = Date()
        var next = start
        while !terminated.load(ordering: .sequentiallyConsistent) {
            say("block \(next) \(next + 10)")
            for id in next..<(next + 10) {
                // Paced: each event at its time since the start.
                let due = Double(id - start) / rate - Date().timeIntervalSince(began)
                if due > 0 { usleep(UInt32(due * 1_000_000)) }
                beacon.track("Chaos", properties: ["cid": .int(Int(id)), "text": "tab\t é 😀 \"quoted\"", "n": .double(Double(id) / 7)])
            }
            do { try beacon.sync() } catch { break }
            // After the termination signal the tracker refuses events: they are not durable.
            if terminated.load(ordering: .sequentiallyConsistent) || beacon.stats.droppedTotal > 0 { break }
            say("durable \(next + 9)")
            next += 10
        }
        while !terminated.load(ordering: .sequentiallyConsistent) { usleep(10_000) }
        // The handler has run (the tracker is closed): give its shutdown a moment to end.
        usleep(100_000)
        say("terminated")
        exit(0)
    }

    static func drain(_ arguments: [String]) -> Never {
        guard arguments.count == 2, let url = URL(string: arguments[1]) else {
            FileHandle.standardError.write(Data("usage: beacon-chaos --tracker-drain DIR URL\n".utf8))
            exit(64)
        }
        let done = DispatchSemaphore(value: 0)
        Task {
            do {
                let beacon = try Beacon(configuration: configuration(arguments[0], url))
                let end = ContinuousClock.now + .seconds(300)
                var sent = 0
                var remaining: UInt64 = 1
                while ContinuousClock.now < end {
                    let result = await beacon.flush(timeout: .seconds(10))
                    sent += result.sent
                    remaining = result.remaining
                    if result.outcome.isComplete && remaining == 0 { break }
                }
                let last = await beacon.shutdown(timeout: .seconds(5))
                sent += last.sent
                say(remaining == 0 && last.remaining == 0 ? "drained \(sent)" : "pending \(max(remaining, last.remaining))")
            } catch {
                say("error \(error)")
            }
            done.signal()
        }
        done.wait()
        exit(0)
    }
}
