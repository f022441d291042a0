import BeaconTestSupport
import Foundation
import Glibc
import Synchronization

/// One run: the producer, the sender and the tracker against the collector, the schedule played
/// for `duration` seconds, then a clean drain and the accounting.
final class ChaosRun: @unchecked Sendable {
    /// The requests in flight the sender and the tracker keep at most (`--window`, the
    /// library's default `maxRequestsInFlight`): what an interruption may send again.
    static let window = 8
    let options: ChaosOptions
    let events: ChaosEvents
    let schedule: ChaosSchedule
    let collector: ChaosCollector
    let sidecarDir: String
    let trackerDir: String
    let logDir: String
    /// Problems of the processes themselves (a crash, a wrong exit status), beside the accounting's.
    private let problems = Mutex<[String]>([])
    private let started = Date()

    // The counts of the summary.
    var counts: [String: Int] = [:]

    init(_ options: ChaosOptions, directory: String) throws {
        self.options = options
        events = ChaosEvents(seed: options.seed)
        schedule = ChaosSchedule(seed: options.seed, duration: options.duration)
        collector = try ChaosCollector(events: events, seed: ChaosEvents.mix(options.seed ^ 0xc011), logPath: directory + "/collector.log")
        sidecarDir = directory + "/sidecar"
        trackerDir = directory + "/tracker"
        logDir = directory
    }

    func problem(_ text: String) {
        progress("PROBLEM: \(text)")
        problems.withLock { $0.append(text) }
    }

    var elapsed: Double { Date().timeIntervalSince(started) }

    func progress(_ line: String) {
        FileHandle.standardError.write(Data("[\(String(format: "%6.1f", elapsed)) s] \(line)\n".utf8))
    }

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

    // MARK: The run

    /// Counts an action for the summary and notes it in `collector.log`.
    func count(_ key: String) {
        counts[key, default: 0] += 1
        collector.note(key)
    }

    func run() throws -> ChaosReport {
        for dir in [sidecarDir, trackerDir] { try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true) }
        progress("seed \(options.seed), \(format(options.duration)) s of chaos; collector on 127.0.0.1:\(collector.port); data and logs in \(logDir)")
        let producer = Producer()
        let producerThread = Thread { self.runProducer(producer) }
        producerThread.start()
        let sender = Sender()
        let tracker = Tracker()
        startSender(sender)
        startTracker(tracker)
        var steps = schedule.steps[...]
        var continueAt: [(at: Double, target: ChaosSchedule.Target, pid: pid_t)] = []
        var collectorUpAt: Double?
        var outageFrom: Int?
        var outageStartedAt = 0.0
        var nextProgress = 10.0
        while elapsed < options.duration {
            let now = elapsed
            // Ends nobody asked for: a crash, or an exit on its own.
            if let child = sender.child, let status = child.poll() {
                problem("beacon send ended by itself with \(ChaosChild.describe(status)) at \(format(now)) s (see \(logDir)/send.log)")
                sender.child = nil
                sender.restartAt = now + 0.5
            }
            if let child = tracker.child, let status = child.poll() {
                problem("the tracker child ended by itself with \(ChaosChild.describe(status)) at \(format(now)) s (see \(logDir)/tracker.log)")
                tracker.child = nil
                tracker.restartAt = now + 0.5
            }
            if let at = sender.restartAt, now >= at { startSender(sender); count("restarts") }
            if let at = tracker.restartAt, now >= at { startTracker(tracker); count("tracker_restarts") }
            for pending in continueAt where now >= pending.at {
                let child = pending.target == .sender ? sender.child : tracker.child
                if let child, child.pid == pending.pid {
                    child.signal(SIGCONT)
                    if pending.target == .sender { sender.stopped = false } else { tracker.stopped = false }
                }
            }
            continueAt.removeAll { now >= $0.at }
            if let at = collectorUpAt, now >= at {
                try collector.comeUp()
                collectorUpAt = nil
            }
            if let from = outageFrom, producer.producedBytes.load(ordering: .relaxed) - from >= options.outageBytes || now - outageStartedAt > 90 {
                progress("outage over after \(format(now - outageStartedAt)) s (\(grouped(producer.producedBytes.load(ordering: .relaxed) - from)) bytes produced meanwhile)")
                try collector.comeUp()
                outageFrom = nil
            }
            while let step = steps.first, step.at <= now {
                steps = steps.dropFirst()
                switch step.target {
                case .sender, .tracker:
                    let isSender = step.target == .sender
                    guard let child = isSender ? sender.child : tracker.child else { count("skipped"); continue }
                    let prefix = isSender ? "" : "tracker_"
                    if isSender ? sender.stopped : tracker.stopped {
                        child.signal(SIGCONT)
                        if isSender { sender.stopped = false } else { tracker.stopped = false }
                    }
                    switch step.action {
                    case .kill:
                        _ = child.killAndReap()
                        count(prefix + "kills")
                        if isSender { sender.child = nil; sender.restartAt = now + step.pause } else { tracker.child = nil; tracker.restartAt = now + step.pause }
                    case .stop:
                        child.signal(SIGSTOP)
                        count(prefix + "stops")
                        continueAt.append((now + step.pause, step.target, child.pid))
                        if isSender { sender.stopped = true } else { tracker.stopped = true }
                    case .term:
                        // Not before the process handles SIGTERM: `beacon send` installs its
                        // handler as it starts (seen in /proc: a fixed second after the spawn was
                        // not always enough under load, and the default action ended it, 3 times
                        // in a 4-minute run), the tracker child says `ready` once it has.
                        if isSender {
                            let end = Date().addingTimeInterval(10)
                            while !child.catches(SIGTERM) && Date() < end { usleep(5000) }
                        } else {
                            let end = Date().addingTimeInterval(10)
                            while !tracker.ready.isSet && Date() < end { usleep(5000) }
                        }
                        count(prefix + "terms")
                        let ended = terminate(child, isSender ? "beacon send" : "the tracker child", log: isSender ? "send" : "tracker")
                        if ended && !isSender && child.waitForOutput(timeout: 5) && !tracker.terminatedLine.isSet {
                            problem("the tracker child exited after SIGTERM without its termination handler having run")
                        }
                        if isSender { sender.child = nil; sender.restartAt = elapsed + step.pause } else { tracker.child = nil; tracker.restartAt = elapsed + step.pause }
                    default: break
                    }
                case .collector:
                    guard collectorUpAt == nil && outageFrom == nil else { count("skipped"); continue }
                    collector.goDown()
                    if step.action == .outage {
                        count("outages")
                        outageFrom = producer.producedBytes.load(ordering: .relaxed)
                        outageStartedAt = now
                        progress("outage: the collector is down until \(grouped(options.outageBytes)) more bytes are produced (the quota is \(grouped(options.quota)))")
                    } else {
                        count("collector_restarts")
                        collectorUpAt = now + step.pause
                    }
                }
            }
            if now >= nextProgress {
                let sidecar = collector.arrivals(.sidecar).seen.count, trackerCount = collector.arrivals(.tracker).seen.count
                progress("produced \(grouped(Int(producer.producedBytes.load(ordering: .relaxed)))) bytes; delivered \(grouped(sidecar)) sidecar and \(grouped(trackerCount)) tracker events; \(counts.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", "))")
                nextProgress += 10
            }
            usleep(10_000)
        }

        // The clean drain: everything running again, the collector accepting everything.
        progress("chaos over; draining")
        producer.stopRequested.store(true, ordering: .relaxed)
        if outageFrom != nil || collectorUpAt != nil { try collector.comeUp() }
        collector.setMode(.clean)
        if let child = tracker.child { _ = child.killAndReap() }
        tracker.child = nil
        if let child = sender.child { terminate(child, "beacon send", log: "send") }
        while !producer.finished.load(ordering: .relaxed) { usleep(10_000) }
        let produced = producer.produced.load(ordering: .relaxed)
        progress("the producer wrote \(grouped(Int(produced))) events in \(producer.runs) runs of beacon append")
        startSender(sender, batch: 50)
        var drained = false
        let drainLine = Mutex<String?>(nil)
        let drainer = try ChaosChild("tracker-drain", path: options.executable, arguments: ["--tracker-drain", trackerDir, collector.url(.tracker)], errorLog: logDir + "/tracker.log") { line in
            drainLine.withLock { $0 = line }
        }
        let drainEnd = elapsed + 300
        var sidecarStatus: [String: Any] = [:]
        while elapsed < drainEnd {
            sidecarStatus = try status(sidecarDir)
            if (sidecarStatus["pending_records"] as? Int) == 0 {
                drained = true
                break
            }
            usleep(250_000)
        }
        if !drained { problem("the sidecar did not drain within 300 s: \(sidecarStatus["pending_records"] ?? "?") records pending") }
        if let child = sender.child { terminate(child, "beacon send", log: "send") }
        if let status = drainer.wait(timeout: max(1, drainEnd - elapsed + 10)) {
            if status != 0 { problem("the tracker's drain ended with \(ChaosChild.describe(status))") }
        } else {
            problem("the tracker's drain did not end in time; killed")
            _ = drainer.killAndReap()
        }
        usleep(100_000)
        let drainResult = drainLine.withLock { $0 } ?? "nothing"
        if !drainResult.hasPrefix("drained") { problem("the tracker's drain said \(drainResult) (see \(logDir)/tracker.log)") }
        progress("drained")
        let trackerStatus = try status(trackerDir)
        sidecarStatus = try status(sidecarDir)

        var report = ChaosReport(seed: options.seed, duration: options.duration, counts: counts, answers: collector.answers)
        report.problems = problems.withLock { $0 }
        report.problems += collector.malformed.map { "the collector got \($0)" }
        report.sources.append(ChaosAccounting.account(
            .sidecar, events: events,
            produced: [0..<produced], maybe: [],
            arrivals: collector.arrivals(.sidecar), status: sidecarStatus,
            rejected: try readRejected(sidecarDir), outages: collector.downWindows, toolDropped: appendSaidDropped(), inDoubt: sendSaidInDoubt(),
            interruptions: (counts["kills"] ?? 0) + (counts["terms"] ?? 0) + (counts["stops"] ?? 0) + (counts["collector_restarts"] ?? 0) + (counts["outages"] ?? 0),
            maxBatch: sender.maxBatch))
        let incarnations = tracker.incarnations.withLock { $0 }
        report.sources.append(ChaosAccounting.account(
            .tracker, events: events,
            produced: incarnations.compactMap { incarnation in incarnation.durable.map { incarnation.start..<($0 + 1) } },
            maybe: incarnations.map { ($0.durable.map { $0 + 1 } ?? $0.start)..<$0.announcedEnd },
            arrivals: collector.arrivals(.tracker), status: trackerStatus,
            rejected: try readRejected(trackerDir), outages: collector.downWindows,
            interruptions: (counts["tracker_kills"] ?? 0) + (counts["tracker_terms"] ?? 0) + (counts["tracker_stops"] ?? 0) + (counts["collector_restarts"] ?? 0) + (counts["outages"] ?? 0),
            maxBatch: 20))
        return report
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

    /// The records `beacon append` said the quota dropped, over all its runs (the sum of the
    /// "dropped N of the oldest pending records" ending each run, in `append.log`): the quota's
    /// own count, of which a sender takes back those delivered after all and those in doubt.
    func appendSaidDropped() -> ChaosAccounting.ToolCount {
        let text = (try? String(contentsOfFile: logDir + "/append.log", encoding: .utf8)) ?? ""
        var count = ChaosAccounting.ToolCount()
        for line in text.split(separator: "\n") {
            guard let range = line.range(of: ") dropped ") else { continue }
            count.dropped += Int(line[range.upperBound...].prefix { $0.isNumber }) ?? 0
        }
        return count
    }

    /// The seqs (here the ids) `beacon send` said the quota deleted after they were sent without
    /// a recorded answer: the "(dropped[quotaInDoubt], maybe delivered): seqs 5-9,12" of its
    /// diagnostics in `send.log`.
    func sendSaidInDoubt() -> [ClosedRange<UInt64>] {
        let text = (try? String(contentsOfFile: logDir + "/send.log", encoding: .utf8)) ?? ""
        var ranges: [ClosedRange<UInt64>] = []
        for line in text.split(separator: "\n") {
            guard let marker = line.range(of: "maybe delivered): seqs ") else { continue }
            let list = line[marker.upperBound...].prefix { $0.isNumber || $0 == "-" || $0 == "," }
            for item in list.split(separator: ",") {
                let bounds = item.split(separator: "-").compactMap { UInt64($0) }
                if let low = bounds.first, let high = bounds.last, low <= high { ranges.append(low...high) }
            }
        }
        return ranges
    }

    /// `beacon status DIR --json`, parsed.
    func status(_ directory: String) throws -> [String: Any] {
        let capture = try SpawnedProcess(options.beacon, ["status", directory, "--json"], stdout: .pipe)
        let data = Data(capture.readOutputToEnd())
        let ending = capture.wait()
        guard ending == .exited(0), let object = try JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            throw ChaosFailure("beacon status \(directory) --json failed (\(ending)): \(String(decoding: data, as: UTF8.self))")
        }
        return object
    }

    /// DIR/rejected.jsonl, one entry per line (none when the file does not exist).
    func readRejected(_ directory: String) throws -> [ChaosAccounting.SetAside] {
        guard let data = FileManager.default.contents(atPath: directory + "/rejected.jsonl") else { return [] }
        return try data.split(separator: 0x0A).map { line in
            let bytes = Array(line)
            guard let object = try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any],
                  let recordStart = bytes.firstRange(of: Array(#""record":"#.utf8)),
                  let id = ChaosEvents.id(in: bytes[recordStart.upperBound...]) else {
                throw ChaosFailure("\(directory)/rejected.jsonl has a line without a record id: \(String(decoding: bytes.prefix(300), as: UTF8.self))")
            }
            return ChaosAccounting.SetAside(id: id, status: object["status"] as? Int, reason: object["reason"] as? String ?? "", at: (object["rejected_at"] as? NSNumber)?.int64Value ?? 0, line: String(decoding: bytes.prefix(400), as: UTF8.self))
        }
    }
}

func format(_ value: Double) -> String { String(format: "%.1f", value) }

/// 1234567 → "1,234,567".
func grouped(_ value: Int) -> String {
    let digits = String(value.magnitude)
    var out = ""
    for (index, character) in digits.enumerated() {
        if index > 0 && (digits.count - index) % 3 == 0 { out += "," }
        out.append(character)
    }
    return (value < 0 ? "-" : "") + out
}
