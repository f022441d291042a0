import Beacon
import Foundation
import Synchronization

/// `beacon-test-child stall DIR BACKPRESSURE PROBES`: a tracker whose writer is frozen (a stalled
/// disk) once its hand-off is full; 4 tasks track flat out on the cooperative pool while a probe
/// task, every 5 ms, times a child task that only needs a pool thread (an untracked route).
/// BACKPRESSURE is `default` or `block100ms` (the former default). Prints the probe's latencies in
/// microseconds, sorted, then `dropped N`. In a process of its own, so that no other test shares
/// (or blocks) its pool.
func runStallChild(_ arguments: [String]) -> Never {
    guard arguments.count >= 3, let probes = Int(arguments[2]), probes > 0 else {
        FileHandle.standardError.write(Data("usage: beacon-test-child stall DIR default|block100ms PROBES\n".utf8))
        exit(64)
    }
    var config = Beacon.Configuration(directory: arguments[0])
    config.lifecycleEvents = false
    config.handoffBytes = 16 * 1024
    config.diagnostics = { _ in }
    if arguments[1] == "block100ms" { config.backpressure = .blockCallingThread(timeout: .milliseconds(100)) }
    let beacon: Beacon
    do { beacon = try Beacon(configuration: config) } catch {
        FileHandle.standardError.write(Data("beacon-test-child stall: \(error)\n".utf8))
        exit(70)
    }
    beacon.setWriterFrozen(true)
    var i = 0
    while beacon.stats.droppedTotal == 0 && beacon.stats.pending < 1000 {   // fill the hand-off
        beacon.track("Fill", properties: ["i": .int(i)])
        i += 1
    }
    let done = DispatchSemaphore(value: 0)
    let result = Mutex<[Int]>([])
    let stop = StallStop()
    Task.detached {
        let latencies = await withTaskGroup(of: [Int].self) { group in
            for t in 0..<4 {   // more than the pool's threads (one per core)
                group.addTask {
                    var i = 0
                    while !stop.value.load(ordering: .relaxed) {
                        beacon.track("Load", properties: ["t": .int(t), "i": .int(i)])
                        i += 1
                        await Task.yield()
                    }
                    return []
                }
            }
            group.addTask {
                var samples: [Int] = []
                for _ in 0..<probes {
                    try? await Task.sleep(for: .milliseconds(5))
                    let start = ContinuousClock.now
                    await withTaskGroup(of: Void.self) { route in
                        route.addTask {}
                        await route.waitForAll()
                    }
                    let elapsed = start.duration(to: .now)
                    samples.append(Int(elapsed.components.seconds) * 1_000_000 + Int(elapsed.components.attoseconds / 1_000_000_000_000))
                }
                stop.value.store(true, ordering: .relaxed)
                return samples
            }
            var all: [Int] = []
            for await samples in group { all += samples }
            return all.sorted()
        }
        result.withLock { $0 = latencies }
        done.signal()
    }
    done.wait()
    let dropped = beacon.stats.droppedTotal
    beacon.setWriterFrozen(false)
    beacon.closeNow()
    let lines = result.withLock { $0.map(String.init) } + ["dropped \(dropped)"]
    FileHandle.standardOutput.write(Data((lines.joined(separator: "\n") + "\n").utf8))
    exit(0)
}

final class StallStop: Sendable {
    let value = Atomic<Bool>(false)
}
