import Beacon
import BeaconLog
import Dispatch
import Foundation

/// `beacon-test-child upload DIR URL BATCH [WINDOW]`: an uploader alone (as `beacon send` runs it)
/// on the log in DIR, delivering its backlog to the collector at URL in requests of BATCH events,
/// at most WINDOW in flight (default: the configuration's); prints
/// "ready" once open and "done SENT" when the log is drained. Tests kill it with SIGKILL while a
/// request is in flight.
func runUploadChild(_ arguments: [String]) -> Never {
    guard (3...4).contains(arguments.count), let url = URL(string: arguments[1]), let batch = Int(arguments[2]) else {
        FileHandle.standardError.write(Data("usage: beacon-test-child upload DIR URL BATCH\n".utf8))
        exit(64)
    }
    let log: BeaconLog
    do {
        log = try BeaconLog(directory: arguments[0])
    } catch {
        FileHandle.standardError.write(Data("beacon-test-child upload: \(error)\n".utf8))
        exit(70)
    }
    var delivery = DeliveryConfiguration(url: url)
    delivery.batchSize = batch
    delivery.catchUpBatchSize = batch  // the kill tests count requests of `batch` events
    if arguments.count == 4, let window = Int(arguments[3]) { delivery.maxRequestsInFlight = window }
    delivery.flushInterval = nil
    // A request timed out and sent again would count as one sent again by a kill: room for a
    // loaded 2-core machine (CI's parallel suite).
    delivery.requestTimeout = .seconds(60)
    let uploader = try! Uploader(log: log, configuration: delivery, diagnostics: { _ in })
    func say(_ line: String) { FileHandle.standardOutput.write(Data((line + "\n").utf8)) }
    say("ready")
    let done = DispatchSemaphore(value: 0)
    Task {
        var sent = 0
        while log.stats.pendingRecords > 0 {
            let result = await uploader.flush()
            sent += result.sent
            if !result.outcome.isComplete { try? await Task.sleep(for: .milliseconds(20)) }
        }
        say("done \(sent)")
        done.signal()
    }
    done.wait()
    exit(0)
}
