import BeaconTestSupport
import Foundation
import Glibc
import Synchronization

/// The producer, the sender and the tracker: how each is started, restarted and ended.
extension ChaosRun {
    // MARK: The producer

    /// The producer: `beacon append SIDECAR --max-disk QUOTA --sync MODE` fed events 0, 1, 2...
    /// at `rate` a second through a pipe; restarted every 20 s with the schedule's next mode (its
    /// input closed: it exits 0 once every line is durable).
    final class Producer: @unchecked Sendable {
        let produced = Atomic<UInt64>(0)
        let producedBytes = Atomic<Int>(0)
        let stopRequested = Atomic<Bool>(false)
        let finished = Atomic<Bool>(false)
        var runs = 0
    }

    func runProducer(_ producer: Producer) {
        var mode = 0
        var next: UInt64 = 0
        let began = Date()
        while !producer.stopRequested.load(ordering: .relaxed) {
            let sync = schedule.syncModes[mode % schedule.syncModes.count]
            mode += 1
            let child: ChaosChild
            do {
                child = try ChaosChild("append", path: options.beacon, arguments: ["append", sidecarDir, "--max-disk", String(options.quota), "--sync", sync], stdinPipe: true, errorLog: logDir + "/append.log")
            } catch {
                problem("the producer cannot start beacon append: \(error)")
                break
            }
            producer.runs += 1
            let runEnd = Date().addingTimeInterval(20)
            var alive = true
            while alive && Date() < runEnd && !producer.stopRequested.load(ordering: .relaxed) {
                let due = UInt64(Date().timeIntervalSince(began) * Double(options.rate))
                var chunk: [UInt8] = []
                var ids = next
                while ids < due && chunk.count < 1 << 20 {
                    chunk += events.sidecarLine(ids)
                    chunk.append(0x0A)
                    ids += 1
                }
                if !chunk.isEmpty {
                    alive = child.write(chunk)
                    // Counted as produced once `append` exits 0 (every line durable); meanwhile
                    // the count only paces the outage.
                    producer.producedBytes.add(chunk.count, ordering: .relaxed)
                    next = ids
                }
                usleep(10_000)
            }
            child.closeInput()
            guard let status = child.wait(timeout: 60) else {
                problem("beacon append (--sync \(sync)) did not exit within 60 s of the end of its input")
                _ = child.killAndReap()
                break
            }
            if status != 0 {
                problem("beacon append (--sync \(sync)) ended with \(ChaosChild.describe(status)) (see \(logDir)/append.log); its lines may not all be durable")
            }
            producer.produced.store(next, ordering: .relaxed)
        }
        producer.finished.store(true, ordering: .relaxed)
    }

    // MARK: The sender

    final class Sender {
        var child: ChaosChild?
        var stopped = false
        var starts = 0
        var maxBatch = 0
        /// Restart when the clock passes this (after a kill or a term).
        var restartAt: Double?
    }

    func startSender(_ sender: Sender, batch: Int? = nil) {
        let planned = schedule.senderBatches[sender.starts % schedule.senderBatches.count]
        let size = batch ?? planned.batch
        let catchUp = batch == nil ? planned.catchUp : 0
        var arguments = ["send", sidecarDir, "--url", collector.url(.sidecar), "--follow", "--format", "ndjson", "--batch", String(size)]
        // No catch-up batch planned: --batch always (the default reads up to 1 MiB while behind,
        // which the duplicate bound below would not know).
        arguments += ["--catch-up-batch", String(catchUp > 0 ? catchUp : size), "--window", String(Self.window)]
        sender.starts += 1
        sender.maxBatch = max(sender.maxBatch, size, catchUp)
        do {
            sender.child = try ChaosChild("send", path: options.beacon, arguments: arguments, errorLog: logDir + "/send.log")
        } catch {
            problem("cannot start beacon send: \(error)")
        }
        sender.stopped = false
        sender.restartAt = nil
    }

    // MARK: The tracker

    final class Tracker: @unchecked Sendable {
        struct Incarnation {
            var start: UInt64
            /// The last id known durable (`durable N`), nil before the first block.
            var durable: UInt64?
            /// The end of the last block announced: ids up to it may have been tracked.
            var announcedEnd: UInt64
        }
        let incarnations = Mutex<[Incarnation]>([])
        var child: ChaosChild?
        var stopped = false
        var restartAt: Double?
        var starts = 0
        let terminatedLine = ChaosFlag()
        /// Set once the child said `ready` (its termination handler is installed).
        let ready = ChaosFlag()

        /// Where the next tracker starts: after every id any earlier one may have tracked.
        var nextStart: UInt64 {
            incarnations.withLock { $0.map(\.announcedEnd).max() ?? 0 }
        }
    }

    func startTracker(_ tracker: Tracker) {
        let start = tracker.nextStart
        let index = tracker.incarnations.withLock { list in
            list.append(Tracker.Incarnation(start: start, durable: nil, announcedEnd: start))
            return list.count - 1
        }
        tracker.terminatedLine.clear()
        tracker.ready.clear()
        do {
            tracker.child = try ChaosChild("tracker", path: options.executable, arguments: ["--tracker-child", trackerDir, collector.url(.tracker), String(start), String(options.trackerRate)], errorLog: logDir + "/tracker.log") { line in
                let parts = line.split(separator: " ")
                switch parts.first {
                case "block":
                    if parts.count == 3, let end = UInt64(parts[2]) { tracker.incarnations.withLock { $0[index].announcedEnd = max($0[index].announcedEnd, end) } }
                case "durable":
                    if parts.count == 2, let last = UInt64(parts[1]) { tracker.incarnations.withLock { $0[index].durable = last } }
                case "ready":
                    tracker.ready.set()
                case "terminated":
                    tracker.terminatedLine.set()
                default: break
                }
            }
        } catch {
            problem("cannot start the tracker child: \(error)")
        }
        tracker.starts += 1
        tracker.stopped = false
        tracker.restartAt = nil
    }

    /// Sends `child` SIGTERM (after SIGCONT, in case it is stopped) and waits for it to end by
    /// itself with exit 0; anything else is a problem (after 15 s it is killed). Whether it ended.
    @discardableResult
    func terminate(_ child: ChaosChild, _ what: String, log: String) -> Bool {
        child.signal(SIGCONT)
        child.signal(SIGTERM)
        guard let status = child.wait(timeout: 15) else {
            let dump = threadDump(child, name: log)
            problem("\(what) did not end within 15 s of SIGTERM; killed\(dump.map { " (its threads then: \($0))" } ?? "")")
            _ = child.killAndReap()
            return false
        }
        if status != 0 { problem("\(what) ended with \(ChaosChild.describe(status)) after SIGTERM (expected exit 0; see \(logDir)/\(log).log)") }
        return true
    }

    /// Every thread's backtrace of `child` (`gdb -p PID -batch -ex 'thread apply all bt'`, at
    /// most 60 s) in a file of the run's directory, whose path is returned; nil without gdb.
    func threadDump(_ child: ChaosChild, name: String) -> String? {
        let gdb = ["/usr/bin/gdb", "/usr/local/bin/gdb"].first { FileManager.default.isExecutableFile(atPath: $0) }
        guard let gdb else {
            progress("no gdb: no thread dump of \(name) \(child.pid)")
            return nil
        }
        let path = "\(logDir)/\(name)-\(child.pid)-threads.txt"
        guard let dumper = try? ChaosChild("gdb", path: gdb, arguments: ["-p", String(child.pid), "-batch", "-ex", "thread apply all bt"], errorLog: path, onLine: { line in
            if let file = fopen(path, "a") {
                fputs(line + "\n", file)
                fclose(file)
            }
        }) else { return nil }
        if dumper.wait(timeout: 60) == nil { _ = dumper.killAndReap() }
        _ = dumper.waitForOutput(timeout: 5)
        return path
    }
}
