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
}
