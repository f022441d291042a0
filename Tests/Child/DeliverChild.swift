import Beacon
import Dispatch
import Foundation

/// `beacon-test-child deliver DIR URL START COUNT [FORMAT]`: a tracker delivering to the collector
/// at URL, in FORMAT (a ``PayloadFormat`` raw value: jsonArray, the default, envelope or ndjson).
/// Tracks events "Numbered" with property `n = START ..< START+COUNT`, a few milliseconds apart,
/// printing "ready" once open and "durable N" each time the events through N are fsynced; then
/// shuts down with a 60 s deadline and prints "done SENT REMAINING". SIGTERM/SIGINT run the
/// termination handler (shutdown with a 30 s grace), which does not end the process: its closure
/// prints "terminated SIGNAL SENT REMAINING", and the child's own code then prints "alive" and
/// exits with status 3. Tests kill it with SIGKILL at random moments.
func runDeliverChild(_ arguments: [String]) -> Never {
    guard arguments.count >= 4, let url = URL(string: arguments[1]), let start = Int(arguments[2]), let count = Int(arguments[3]) else {
        FileHandle.standardError.write(Data("usage: beacon-test-child deliver DIR URL START COUNT [FORMAT]\n".utf8))
        exit(64)
    }
    var config = Beacon.Configuration(directory: arguments[0], serverURL: url)
    config.storage.segmentBytes = 16 * 1024
    config.lifecycleEvents = false
    config.backpressure = .blockCallingThread(timeout: .seconds(30))   // its own main thread: wait, never drop
    config.diagnostics = { _ in }
    var delivery = DeliveryConfiguration(url: url)
    delivery.batchSize = 20
    delivery.catchUpBatchSize = 20
    delivery.flushBulkSize = 20
    delivery.flushInterval = .seconds(5)
    delivery.backoff = .init(initial: .milliseconds(20), maximum: .milliseconds(200))
    // Deadlines for what is expected to happen, with room for a loaded 2-core machine (CI's
    // parallel suite): a request timed out and sent again, or a drain cut short, fails a test.
    delivery.requestTimeout = .seconds(30)
    if arguments.count >= 5 {
        guard let format = PayloadFormat(rawValue: arguments[4]) else {
            FileHandle.standardError.write(Data("beacon-test-child deliver: unknown format \(arguments[4])\n".utf8))
            exit(64)
        }
        delivery.format = format
    }
    config.delivery = delivery
    let beacon: Beacon
    do {
        beacon = try Beacon(configuration: config)
    } catch {
        FileHandle.standardError.write(Data("beacon-test-child deliver: \(error)\n".utf8))
        exit(70)
    }
    @Sendable func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }
    let terminated = DispatchSemaphore(value: 0)
    beacon.installTerminationHandler(grace: .seconds(30)) { signal, report in
        say("terminated \(signal) \(report.sent) \(report.remaining)")
        terminated.signal()
    }
    say("ready")
    for n in start..<(start + count) {
        beacon.track("Numbered", properties: ["n": .int(n)])
        if (n - start) % 10 == 9 || n == start + count - 1 {
            do { try beacon.sync() } catch { break }
            // After a termination signal the tracker stops accepting: later events are not durable.
            if beacon.stats.droppedTotal > 0 { break }
            say("durable \(n)")
        }
        usleep(300)
    }
    if beacon.stats.droppedTotal > 0 {
        // Closed by the termination handler, which leaves the process to this code.
        terminated.wait()
        usleep(100_000)
        say("alive")
        exit(3)
    }
    let done = DispatchSemaphore(value: 0)
    Task {
        let report = await beacon.shutdown(timeout: .seconds(60))
        say("done \(report.sent) \(report.remaining)")
        done.signal()
    }
    done.wait()
    exit(0)
}
