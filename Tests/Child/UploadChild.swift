import Beacon
import BeaconLog
import Dispatch
import Foundation

/// `beacon-test-child upload DIR URL BATCH`: an uploader alone (as `beacon send` runs it) on the
/// log in DIR, delivering its backlog to the collector at URL in requests of BATCH events; prints
/// "ready" once open and "done SENT" when the log is drained. Tests kill it with SIGKILL while a
/// request is in flight.
func runUploadChild(_ arguments: [String]) -> Never {
    guard arguments.count == 3, let url = URL(string: arguments[1]), let batch = Int(arguments[2]) else {
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
    delivery.flushInterval = nil
    delivery.requestTimeout = .seconds(5)
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
