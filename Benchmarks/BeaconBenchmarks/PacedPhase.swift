import Beacon
import Foundation
import Glibc
import Synchronization

/// What a service pays: `track` at paced rates (1k, 10k, 50k, 100k events/s) from 2 threads, one event
/// per time slot as request handlers track, with the default configuration delivering to the
/// loopback collector in a child process; beside it, the same paced loop without Beacon (it builds
/// the same properties and throws them away). `beacon-bench --phase paced`.
///
/// Per rate: CPU per event of the whole process and of each thread (by name, from
/// `/proc/self/task/*/schedstat`; threads that ended meanwhile are `exited`), the writer thread's
/// wakeups (voluntary context switches) per second and per event, its group commits per second
/// (the batches it took: each commit's write and fsync wait for the disk more than once, so the
/// switches are a few per commit), the process's context switches per event (`getrusage`), and
/// the RSS added from before the tracker opened to the end.
/// A tracker that trickles pays per event what a tight loop (phase `track`) hides: wakeups.
enum PacedPhase: BenchPhase {
    static let name = "paced"
    static let summary = "track at paced rates (1k, 10k, 50k, 100k ev/s, 2 threads, one event per slot, delivery on) vs the same loop without Beacon: CPU per event per thread, wakeups, commits, RSS"

    /// The rates, events per second over both threads.
    static let rates = [1_000, 10_000, 50_000, 100_000]

    static func runRound(_ context: BenchContext) throws -> [Figure] {
        let seconds = context.pacedSeconds ?? (context.quick ? 1 : 10)
        let collector = try BenchCollector(.loopback, directory: context.directory)
        defer { collector.stop() }
        var figures: [Figure] = []
        for rate in context.pacedRates.isEmpty ? rates : context.pacedRates {
            // Without Beacon first, then with it, in the same conditions.
            let without = try run(rate: rate, seconds: seconds, beacon: nil)
            var config = Beacon.Configuration(directory: try context.scratch("beacon-paced-\(rate)"), serverURL: collector.url)
            config.lifecycleEvents = false
            if let ms = context.pacedIntervalMilliseconds {
                config.storage.durability = .batched(records: 100, interval: .milliseconds(ms))
            }
            let with = try run(rate: rate, seconds: seconds, beacon: config)
            // The physical limit in the same conditions: the commits the writer made, at its pace,
            // each a write and an fsync of a zero-filled file, with nothing else.
            let floor = try CommitFloor.measure(commitsPerSecond: with.writerCommitsPerSecond, bytesPerCommit: with.bytesPerCommit,
                                                seconds: min(seconds, 5), directory: try context.scratch("paced-floor-\(rate)"))
            // And the requests the uploader made, at its pace and size, on a bare keep-alive loop.
            let deliveryFloor = try DeliveryFloor.measure(requestsPerSecond: with.requestsPerSecond, eventsPerRequest: with.eventsPerRequest,
                                                          bytesPerRequest: with.bytesPerRequest, seconds: min(seconds, 5), port: collector.port)
            figures += report(rate: rate, with: with, without: without, floor: floor, deliveryFloor: deliveryFloor)
            FileHandle.standardError.write(Data("paced \(rate) ev/s: \(format(with.cpuMicrosecondsPerEvent - without.cpuMicrosecondsPerEvent, 2)) µs of CPU added per event, Beacon's own \(format((with.ownCPUSeconds - without.trackCPUSeconds) / Double(max(with.events, 1)) * 1e6, 2)) (track \(format((with.trackCPUSeconds - without.trackCPUSeconds) / Double(max(with.events, 1)) * 1e6, 2)), less \(format(without.trackCPUSeconds / Double(max(without.events, 1)) * 1e6, 2)) for the clock reads) (the commits alone, at the writer's pace, cost \(format(floor.cpuMicrosecondsPerCommit * with.writerCommitsPerSecond / Double(rate), 2)) µs per event), writer \(format(with.writerCommitsPerSecond, 0)) commits/s, woken \(format(with.writerWaitsEndedPerSecond, 0)) times/s from its wait and \(format(with.writerDiskWaitsPerSecond, 0)) times/s inside write and fsync (alone: \(format(floor.switchesPerCommit * with.writerCommitsPerSecond, 0))); \(format(with.requestsPerSecond, 0)) requests/s of \(with.eventsPerRequest) events, the uploader \(format(with.uploaderCPUSeconds / Double(max(with.requests, 1)) * 1e6, 0)) µs per request, a bare keep-alive loop \(format(deliveryFloor.cpuMicrosecondsPerRequest, 0)) µs (\(format(deliveryFloor.cpuMicrosecondsPerRequest * with.requestsPerSecond / Double(rate), 2)) µs per event); threads: \(with.threadSummary)\n".utf8))
        }
        return figures
    }

    static func report(rate: Int, with: Run, without: Run, floor: CommitFloor, deliveryFloor: DeliveryFloor) -> [Figure] {
        let mode = "\(rate)"
        let n = [("n", String(with.events))]
        let writerCPU = with.threadCPU["beacon-writer"] ?? 0
        let writerPerCommit = writerCPU / Double(max(with.writerCommits, 1)) * 1e6
        let uploaderPerRequest = with.uploaderCPUSeconds / Double(max(with.requests, 1)) * 1e6
        let commitFloorPerEvent = floor.cpuMicrosecondsPerCommit * with.writerCommitsPerSecond / Double(rate)
        let deliveryFloorPerEvent = deliveryFloor.cpuMicrosecondsPerRequest * with.requestsPerSecond / Double(rate)
        return [
            .value("beacon", name, "cpu_us_per_event_\(mode)", with.cpuMicrosecondsPerEvent, fields: n + [("threads", with.threadSummary)]),
            .value("without", name, "cpu_us_per_event_\(mode)", without.cpuMicrosecondsPerEvent, fields: [("n", String(without.events)), ("threads", without.threadSummary)]),
            .value("beacon", name, "cpu_us_added_per_event_\(mode)", with.cpuMicrosecondsPerEvent - without.cpuMicrosecondsPerEvent, fields: n),
            .value("beacon", name, "own_cpu_us_per_event_\(mode)", (with.ownCPUSeconds - without.trackCPUSeconds) / Double(max(with.events, 1)) * 1e6,
                   fields: n + [("track_us", format((with.trackCPUSeconds - without.trackCPUSeconds) / Double(max(with.events, 1)) * 1e6, 2)),
                                ("clock_reads_us", format(without.trackCPUSeconds / Double(max(without.events, 1)) * 1e6, 2))]),
            .value("beacon", name, "writer_wakeups_per_s_\(mode)", with.writerWakeupsPerSecond, fields: n),
            .value("beacon", name, "writer_wakeups_per_event_\(mode)", with.writerWakeupsPerEvent, fields: n),
            .value("beacon", name, "writer_commits_per_s_\(mode)", with.writerCommitsPerSecond, fields: n),
            // The writer's wakeups split: back from its own wait (for records, or the end of a
            // gathering interval), and the rest of its voluntary switches: waits for the disk
            // inside write and fsync.
            .value("beacon", name, "writer_wait_wakeups_per_s_\(mode)", with.writerWaitsEndedPerSecond, fields: n),
            .value("beacon", name, "writer_disk_waits_per_s_\(mode)", with.writerDiskWaitsPerSecond, fields: n),
            // The physical limit, measured in the same run: a bare write + fsync loop at the
            // writer's commit pace and commit size (CommitFloor).
            .value("floor", name, "cpu_us_per_commit_\(mode)", floor.cpuMicrosecondsPerCommit, fields: [("bytes", String(with.bytesPerCommit))]),
            .value("floor", name, "switches_per_commit_\(mode)", floor.switchesPerCommit),
            .value("beacon", name, "writer_cpu_us_per_commit_\(mode)", writerPerCommit, fields: [("ratio_to_floor", format(writerPerCommit / max(floor.cpuMicrosecondsPerCommit, 0.001), 2))]),
            .value("floor", name, "cpu_us_per_event_\(mode)", commitFloorPerEvent, fields: n),
            // The uploader's requests against a bare keep-alive loop making the same requests at
            // the same pace to the same collector (DeliveryFloor): the uploader's thread and the
            // concurrency pool's (its loop's tasks) per request.
            .value("beacon", name, "requests_per_s_\(mode)", with.requestsPerSecond, fields: [("events_per_request", String(with.eventsPerRequest)), ("bytes_per_request", String(with.bytesPerRequest))]),
            .value("floor", name, "cpu_us_per_request_\(mode)", deliveryFloor.cpuMicrosecondsPerRequest, fields: [("switches", format(deliveryFloor.switchesPerRequest, 2))]),
            .value("beacon", name, "uploader_cpu_us_per_request_\(mode)", uploaderPerRequest, fields: [("ratio_to_floor", format(uploaderPerRequest / max(deliveryFloor.cpuMicrosecondsPerRequest, 0.001), 2))]),
            .value("floor", name, "delivery_cpu_us_per_event_\(mode)", deliveryFloorPerEvent, fields: n),
            // Both floors together: what durable commits and deliveries at this pace cost here
            // before any code of Beacon's (the `track` calls' own work excluded).
            .value("floor", name, "commit_and_delivery_cpu_us_per_event_\(mode)", commitFloorPerEvent + deliveryFloorPerEvent, fields: n),
            .value("beacon", name, "switches_per_event_\(mode)", with.switchesPerEvent, fields: n),
            .value("without", name, "switches_per_event_\(mode)", without.switchesPerEvent),
            .value("beacon", name, "switches_added_per_event_\(mode)", with.switchesPerEvent - without.switchesPerEvent, fields: n),
            .value("beacon", name, "rss_added_mib_\(mode)", with.rssAddedMiB, fields: [("start_mib", format(with.rssStartMiB, 1))]),
            .value("without", name, "rss_added_mib_\(mode)", without.rssAddedMiB, fields: [("start_mib", format(without.rssStartMiB, 1))]),
        ]
    }

    /// One paced run's counts.
    struct Run {
        var events = 0
        var seconds = 0.0
        var cpuSeconds = 0.0
        var switches = 0
        var writerWakeups = 0
        var writerCommits: UInt64 = 0
        /// Times the writer came back from waiting for work (its own wakeups).
        var writerWaitsEnded: UInt64 = 0
        /// CPU seconds by thread name.
        var threadCPU: [String: Double] = [:]
        var rssStartMiB = 0.0
        var rssAddedMiB = 0.0

        var cpuMicrosecondsPerEvent: Double { cpuSeconds / Double(max(events, 1)) * 1e6 }
        var switchesPerEvent: Double { Double(switches) / Double(max(events, 1)) }
        var writerWakeupsPerSecond: Double { Double(writerWakeups) / seconds }
        var writerWakeupsPerEvent: Double { Double(writerWakeups) / Double(max(events, 1)) }
        var writerCommitsPerSecond: Double { Double(writerCommits) / seconds }
        var writerWaitsEndedPerSecond: Double { Double(writerWaitsEnded) / seconds }
        /// The writer's voluntary switches that were not the end of its wait: the disk's.
        var writerDiskWaitsPerSecond: Double { Double(max(0, writerWakeups - Int(writerWaitsEnded))) / seconds }
        /// CPU seconds inside the `track` calls (the producers' share that is Beacon's); without
        /// Beacon, what the same two clock reads around nothing take.
        var trackCPUSeconds = 0.0
        /// Beacon's own CPU: the `track` calls, Beacon's threads (`beacon-*`) and the Swift
        /// concurrency pool's (only the uploader's tasks run there in this loop). The difference
        /// with the loop without Beacon also counts what Beacon's presence costs the rest (caches,
        /// scheduling), and the noise of two runs.
        var ownCPUSeconds: Double {
            trackCPUSeconds + threadCPU.filter { $0.key.hasPrefix("beacon-") && $0.key != "beacon-bench" || $0.key.hasSuffix("-qos") || $0.key.hasSuffix("overcommit") }.values.reduce(0, +)
        }
        /// Requests the uploader made meanwhile, and their events and body bytes.
        var requests: UInt64 = 0
        var requestEvents: UInt64 = 0
        var requestBytes: UInt64 = 0
        var requestsPerSecond: Double { Double(requests) / seconds }
        var eventsPerRequest: Int { Int(requestEvents / max(requests, 1)) }
        var bytesPerRequest: Int { Int(requestBytes / max(requests, 1)) }
        /// The uploader's thread and the concurrency pool's, where its delivery loop runs.
        var uploaderCPUSeconds: Double {
            threadCPU.filter { $0.key == "beacon-uploader" || $0.key.hasSuffix("-qos") || $0.key.hasSuffix("overcommit") }.values.reduce(0, +)
        }
        /// Bytes the log appended (frames included).
        var appendedBytes: UInt64 = 0
        /// What a commit wrote, on average.
        var bytesPerCommit: Int { Int(appendedBytes / max(writerCommits, 1)) }
        /// `name:µs/event` for each thread name, largest first.
        var threadSummary: String {
            threadCPU.sorted { $0.value > $1.value }
                .map { "\($0.key.replacingOccurrences(of: " ", with: "_")):\(format($0.value / Double(max(events, 1)) * 1e6, 2))" }
                .joined(separator: ",")
        }
    }

    /// Tracks (or, without a configuration, only builds the properties) at `rate` events/s from
    /// two threads for `seconds`.
    static func run(rate: Int, seconds: Double, beacon configuration: Beacon.Configuration?) throws -> Run {
        Allocator.trim()
        var result = Run()
        result.rssStartMiB = Memory.currentMiB
        let beacon = try configuration.map { try Beacon(configuration: $0) }
        let users = (0..<1000).map { "user-\($0)" }
        let producers = 2
        let perThread = Int(Double(rate) * seconds) / producers
        let slot = 1e9 * Double(producers) / Double(rate)
        let threadsBefore = ThreadTimes.sample()
        let usageBefore = Usage.now()
        let commitsBefore = beacon?.writerCommits ?? 0
        let waitsBefore = beacon?.writerWaitsEnded ?? 0
        let bytesBefore = beacon?.appendedBytes ?? 0
        let deliveryBefore = beacon?.deliveryStats
        let start = now()
        let group = DispatchGroup()
        // The CPU the track calls themselves take on the producers (thread CPU clock around each).
        let trackNanoseconds = Atomic<UInt64>(0)
        // The producers stay until their CPU time is sampled (an ended thread leaves /proc).
        let sampled = DispatchSemaphore(value: 0)
        for p in 0..<producers {
            group.enter()
            let thread = Thread {
                nameThread("paced-producer")
                var next = monotonicNanoseconds() + UInt64(Double(p) * slot / Double(producers))
                var spent: UInt64 = 0
                for i in 0..<perThread {
                    sleep(untilNanoseconds: next)
                    next += UInt64(slot)
                    let properties: [String: PropertyValue] = ["price": 9.99, "item": "book", "count": 3, "vip": true]
                    if let beacon {
                        let before = threadCPUNanoseconds()
                        beacon.track("Purchase", properties: properties, distinctId: users[(i * producers + p) % 1000])
                        spent += threadCPUNanoseconds() - before
                    } else {
                        // Bracketed the same way: what the clock reads cost, to subtract.
                        let before = threadCPUNanoseconds()
                        discard(properties, users[(i * producers + p) % 1000])
                        spent += threadCPUNanoseconds() - before
                    }
                }
                trackNanoseconds.add(spent, ordering: .relaxed)
                group.leave()
                sampled.wait()
            }
            thread.start()
        }
        group.wait()
        result.seconds = now() - start
        let usageAfter = Usage.now()
        let threadsAfter = ThreadTimes.sample()
        result.writerCommits = (beacon?.writerCommits ?? 0) - commitsBefore
        result.writerWaitsEnded = (beacon?.writerWaitsEnded ?? 0) - waitsBefore
        result.trackCPUSeconds = Double(trackNanoseconds.load(ordering: .relaxed)) / 1e9
        result.appendedBytes = (beacon?.appendedBytes ?? 0) - bytesBefore
        if let before = deliveryBefore, let after = beacon?.deliveryStats {
            result.requests = after.sentRequests - before.sentRequests
            result.requestEvents = after.sentEvents - before.sentEvents
            result.requestBytes = after.sentBytes - before.sentBytes
        }
        for _ in 0..<producers { sampled.signal() }
        result.events = perThread * producers
        result.cpuSeconds = usageAfter.cpuSeconds - usageBefore.cpuSeconds
        result.switches = usageAfter.switches - usageBefore.switches
        var counted = 0.0
        for (tid, after) in threadsAfter {
            let before = threadsBefore[tid]
            let cpu = after.cpuSeconds - (before?.cpuSeconds ?? 0)
            guard cpu > 0 || after.name == "beacon-writer" else { continue }
            result.threadCPU[after.name, default: 0] += cpu
            counted += cpu
            if after.name == "beacon-writer" { result.writerWakeups += after.voluntarySwitches - (before?.voluntarySwitches ?? 0) }
        }
        if result.cpuSeconds - counted > 0.0005 { result.threadCPU["exited", default: 0] += result.cpuSeconds - counted }
        if let beacon {
            let stats = beacon.stats
            guard stats.tracked == UInt64(result.events), stats.droppedTotal == 0, stats.invalid == 0 else {
                throw BenchFailure("paced: tracked \(stats.tracked) of \(result.events), dropped \(stats.dropped), invalid \(stats.invalid)")
            }
        }
        result.rssAddedMiB = Memory.currentMiB - result.rssStartMiB
        if let beacon { _ = blockOn { await beacon.shutdown(timeout: .seconds(10)) } }
        return result
    }

    @inline(never)
    static func discard(_ properties: [String: PropertyValue], _ user: String) {
        if properties.count == 99, user.isEmpty { print("unreachable") }
    }

    /// `clock_nanosleep` on `CLOCK_MONOTONIC` until `deadline`; at once when it has passed.
    static func sleep(untilNanoseconds deadline: UInt64) {
        var spec = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
        while clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &spec, nil) == EINTR {}
    }

    /// The calling thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`).
    static func threadCPUNanoseconds() -> UInt64 {
        var spec = timespec()
        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &spec)
        return UInt64(spec.tv_sec) * 1_000_000_000 + UInt64(spec.tv_nsec)
    }

    static func monotonicNanoseconds() -> UInt64 {
        var spec = timespec()
        clock_gettime(CLOCK_MONOTONIC, &spec)
        return UInt64(spec.tv_sec) * 1_000_000_000 + UInt64(spec.tv_nsec)
    }

    /// Names the calling thread for `/proc/self/task/TID/comm` (`pthread_setname_np`, looked up
    /// by name: the Glibc module does not import it).
    static func nameThread(_ name: String) {
        typealias SetName = @convention(c) (pthread_t, UnsafePointer<CChar>) -> Int32
        guard let process = dlopen(nil, RTLD_NOW) else { return }
        defer { dlclose(process) }
        guard let symbol = dlsym(process, "pthread_setname_np") else { return }
        _ = unsafeBitCast(symbol, to: SetName.self)(pthread_self(), name)
    }

    /// The process's CPU time and context switches (`getrusage(RUSAGE_SELF)`: every thread,
    /// ended ones included).
    struct Usage {
        var cpuSeconds: Double
        var switches: Int
        static func now() -> Usage {
            var usage = rusage()
            getrusage(RUSAGE_SELF.rawValue, &usage)
            return Usage(cpuSeconds: Memory.cpuSeconds, switches: usage.ru_nvcsw + usage.ru_nivcsw)
        }
    }

    /// Each live thread's name, CPU time (`schedstat`: nanoseconds on a CPU) and voluntary
    /// context switches (`status`), by thread id.
    struct ThreadTimes {
        var name: String
        var cpuSeconds: Double
        var voluntarySwitches: Int

        static func sample() -> [String: ThreadTimes] {
            var threads: [String: ThreadTimes] = [:]
            for tid in (try? FileManager.default.contentsOfDirectory(atPath: "/proc/self/task")) ?? [] {
                let base = "/proc/self/task/\(tid)/"
                guard let comm = try? String(contentsOfFile: base + "comm", encoding: .utf8),
                      let schedstat = try? String(contentsOfFile: base + "schedstat", encoding: .utf8),
                      let status = try? String(contentsOfFile: base + "status", encoding: .utf8) else { continue }
                let cpu = Double(schedstat.split(separator: " ").first ?? "0") ?? 0
                var voluntary = 0
                for line in status.split(separator: "\n") where line.hasPrefix("voluntary_ctxt_switches:") {
                    voluntary = Int(line.split(separator: "\t").last?.trimmingCharacters(in: .whitespaces) ?? "") ?? 0
                }
                threads[tid] = ThreadTimes(name: comm.trimmingCharacters(in: .whitespacesAndNewlines), cpuSeconds: cpu / 1e9, voluntarySwitches: voluntary)
            }
            return threads
        }
    }
}
