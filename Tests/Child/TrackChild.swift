import Beacon
import Foundation

/// `beacon-test-child track DIR COUNT`: tracks events `n = 0 ..< COUNT` (event "Numbered",
/// property `n`) as fast as it can, printing "ready" once the tracker is open and "done" once
/// every event is durable, then waits to be killed. A test kills it with SIGKILL at a random moment.
func runTrackChild(_ arguments: [String]) -> Never {
    guard arguments.count >= 2, let count = Int(arguments[1]) else {
        FileHandle.standardError.write(Data("usage: beacon-test-child track DIR COUNT\n".utf8))
        exit(64)
    }
    var config = Beacon.Configuration(directory: arguments[0])
    config.storage.segmentBytes = 16 * 1024
    config.lifecycleEvents = false
    config.backpressure = .blockCallingThread(timeout: .seconds(30))   // its own main thread: wait, never drop
    let beacon: Beacon
    do {
        beacon = try Beacon(configuration: config)
    } catch {
        FileHandle.standardError.write(Data("beacon-test-child track: \(error)\n".utf8))
        exit(70)
    }
    FileHandle.standardOutput.write(Data("ready\n".utf8))
    for n in 0..<count {
        beacon.track("Numbered", properties: ["n": .int(n), "pad": "some text to fill the segment \(n)"])
    }
    beacon.closeNow()
    FileHandle.standardOutput.write(Data("done\n".utf8))
    while true { sleep(60) }
}
