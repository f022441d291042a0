import Foundation
import Glibc

/// One benchmark phase: a file with a type conforming to `BenchPhase` plus one line in
/// ``benchPhases``. Each round calls ``runRound(_:)`` once per selected phase, in registry order.
protocol BenchPhase {
    /// The name used by `--phase` and in the `phase=` field (`A`, `B`, `open`).
    static var name: String { get }
    /// One line for `--help`.
    static var summary: String { get }
    /// Runs one round and returns its figures. Use `context.scratch(...)` for directories.
    static func runRound(_ context: BenchContext) throws -> [Figure]
    /// Whether the phase uses the workload's payloads (``BenchContext/payloads(_:)``); before a
    /// phase that does not, they are freed, so they do not count in its memory (default false).
    static var usesPayloads: Bool { get }
}

extension BenchPhase {
    static var usesPayloads: Bool { false }
}

/// What a phase needs: sizes, the data directory, the pre-generated payloads.
final class BenchContext {
    /// `--quick`: small N for a smoke run.
    let quick: Bool
    /// The directory holding every phase's data (same file system as the working directory by default).
    let directory: String
    /// The round being run, from 1.
    var round = 1
    /// What a phase prepared in an earlier round and reuses (for example a backlog's directory).
    var prepared: [String: String] = [:]
    /// `--soak-seconds`, `--soak-rate`, `--soak-backlog`.
    var soak = SoakOptions()
    /// `--append-mode`: the modes of phase A to run (empty: all).
    var appendModes: Set<String> = []
    /// `--upload-mode`: the upload modes to run (empty: all).
    var uploadModes: Set<String> = []
    /// `--paced-seconds`: how long each rate of the paced phase runs (nil: its default).
    var pacedSeconds: Double?
    /// `--paced-rate`: the rates the paced phase runs (empty: its defaults).
    var pacedRates: [Int] = []
    /// `--paced-interval-ms`: the paced phase's commit interval (nil: the default policy).
    var pacedIntervalMilliseconds: Int?
    private var payloadCache: [Int: Payloads] = [:]

    /// Whether the upload phase runs `mode` (`--upload-mode`).
    func runs(upload mode: String) -> Bool { uploadModes.isEmpty || uploadModes.contains(mode) }

    init(quick: Bool, directory: String) {
        self.quick = quick
        self.directory = directory
    }

    /// N for a workload mode: the full sizes, or small ones under `--quick`.
    func n(_ mode: String) -> Int {
        switch mode {
        case "each": quick ? 200 : 5000
        case "group100": quick ? 10_000 : 200_000
        default: quick ? 20_000 : 200_000
        }
    }

    /// Events `0..<n` of the workload, generated once and kept (generation is never timed).
    func payloads(_ n: Int) -> Payloads {
        if let cached = payloadCache[n] { return cached }
        let generated = Payloads(count: n)
        payloadCache[n] = generated
        return generated
    }

    /// Frees the payloads (about 50 MiB for N = 200k) and gives the memory back to the system; the
    /// next ``payloads(_:)`` generates them again (untimed).
    func releasePayloads() {
        guard !payloadCache.isEmpty else { return }
        payloadCache = [:]
        Allocator.trim()
    }

    /// A fresh, empty directory `name` under ``directory`` (removed first if it exists).
    func scratch(_ name: String) throws -> String {
        let path = directory + "/" + name
        try? FileManager.default.removeItem(atPath: path)
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        return path
    }
}

/// The workload's events, as byte arrays: `Purchase` events for 1000 users, each about 200 bytes.
struct Payloads {
    let events: [[UInt8]]
    /// Total payload bytes (no newline): MB/s is computed from this.
    let totalBytes: Int

    init(count: Int) {
        var events: [[UInt8]] = []
        events.reserveCapacity(count)
        var total = 0
        for i in 0..<count {
            let text = "{\"distinct_id\":\"user-\(i % 1000)\",\"event\":\"Purchase\",\"time\":\(1_700_000_000_000 + i),\"_track_id\":\(i),\"properties\":{\"$lib\":\"Swift\",\"$lib_version\":\"1.0.0\",\"$os\":\"Linux\",\"price\":9.99,\"item\":\"book\",\"count\":3,\"vip\":true}}"
            let bytes = Array(text.utf8)
            total += bytes.count
            events.append(bytes)
        }
        // Pinned byte totals: the payloads stay exactly those of earlier runs, so figures compare.
        if count == 5000 { precondition(total == 988_340, "workload payloads differ from the pinned workload (5,000 events: \(total) bytes)") }
        if count == 200_000 { precondition(total == 39_866_890, "workload payloads differ from the pinned workload (200,000 events: \(total) bytes)") }
        self.events = events
        self.totalBytes = total
    }
}

/// One measured figure of one round.
struct Figure {
    /// `beacon` or `raw` (or another peer).
    var peer: String
    /// `A`, `B`, `open`, ...
    var phase: String
    /// `none`, `group100`, `each`, `batch50`, ... (empty for value figures).
    var mode: String
    var kind: Kind

    enum Kind {
        /// `n` events (of `bytes` payload bytes) in `seconds`.
        case throughput(n: Int, bytes: Int, seconds: Double)
        /// A named value such as `open_ms`, with extra fields printed before it.
        case value(name: String, value: Double, fields: [(String, String)])
    }

    static func throughput(_ peer: String, _ phase: String, _ mode: String, n: Int, bytes: Int, seconds: Double) -> Figure {
        Figure(peer: peer, phase: phase, mode: mode, kind: .throughput(n: n, bytes: bytes, seconds: seconds))
    }

    static func value(_ peer: String, _ phase: String, _ name: String, _ value: Double, fields: [(String, String)] = []) -> Figure {
        Figure(peer: peer, phase: phase, mode: "", kind: .value(name: name, value: value, fields: fields))
    }

    /// The same figure under another mode (a reference shared by several modes of one round).
    /// Value figures carry the mode at the end of their name (`cpu_us_per_request_batch50`).
    func renamed(from old: String, to mode: String) -> Figure {
        var copy = self
        switch kind {
        case .throughput: copy.mode = mode
        case .value(let name, let value, let fields):
            copy.kind = .value(name: name.hasSuffix(old) ? String(name.dropLast(old.count)) + mode : name, value: value, fields: fields)
        }
        return copy
    }

    var eventsPerSecond: Double {
        if case .throughput(let n, _, let seconds) = kind { return Double(n) / seconds }
        return 0
    }

    var key: String { "\(peer)|\(phase)|\(mode)|\(valueName ?? "")" }

    var valueName: String? {
        if case .value(let name, _, _) = kind { return name }
        return nil
    }

    var sortValue: Double {
        switch kind {
        case .throughput: eventsPerSecond
        case .value(_, let value, _): value
        }
    }

    /// The figure as one `peer=… phase=… key=value` line, the format other implementations' runs
    /// print, so results compare line by line.
    var peerLine: String {
        switch kind {
        case .throughput(let n, let bytes, let seconds):
            return "peer=\(peer) phase=\(phase) mode=\(mode) n=\(n) events_per_s=\(Int((Double(n) / seconds).rounded())) mb_per_s=\(format(Double(bytes) / seconds / 1e6, 2))"
        case .value(let name, let value, let fields):
            let extra = fields.map { " \($0.0)=\($0.1)" }.joined()
            return "peer=\(peer) phase=\(phase)\(mode.isEmpty ? "" : " mode=\(mode)")\(extra) \(name)=\(format(value, 2))"
        }
    }
}

/// Monotonic time in seconds (`clock_gettime(CLOCK_MONOTONIC)`).
func now() -> Double {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return Double(spec.tv_sec) + Double(spec.tv_nsec) / 1e9
}

/// Runs `body` and returns its duration in seconds.
func time(_ body: () throws -> Void) rethrows -> Double {
    let start = now()
    try body()
    return now() - start
}

/// `value` with `digits` decimals.
func format(_ value: Double, _ digits: Int) -> String {
    String(format: "%.\(digits)f", value)
}

/// `1234567` → `1,234,567`.
func grouped(_ value: Double) -> String {
    let digits = String(Int(value.rounded()))
    var out = ""
    for (i, c) in digits.enumerated() {
        if i > 0 && (digits.count - i) % 3 == 0 { out += "," }
        out.append(c)
    }
    return out
}

func median(_ values: [Double]) -> Double {
    let sorted = values.sorted()
    if sorted.isEmpty { return .nan }
    return sorted.count % 2 == 1 ? sorted[sorted.count / 2] : (sorted[sorted.count / 2 - 1] + sorted[sorted.count / 2]) / 2
}

/// Peak and current resident memory of this process (`VmHWM`, `VmRSS` in /proc/self/status), in MiB.
enum Memory {
    static func field(_ name: String) -> Double {
        guard let text = try? String(contentsOfFile: "/proc/self/status", encoding: .utf8) else { return .nan }
        for line in text.split(separator: "\n") where line.hasPrefix(name + ":") {
            let number = line.split(separator: " ").compactMap { Double($0) }.first ?? .nan
            return number / 1024
        }
        return .nan
    }
    static var peakMiB: Double { field("VmHWM") }
    static var currentMiB: Double { field("VmRSS") }
    /// The peak RSS while `body` runs, in MiB, sampled from /proc/self/statm every 2 ms by a
    /// thread (resetting `VmHWM` through /proc/self/clear_refs does not work on every kernel).
    static func peak<T>(during body: () throws -> T) rethrows -> (T, peakMiB: Double) {
        let sampler = PeakSampler()
        let value = try body()
        return (value, sampler.stop())
    }

    /// This process's CPU time so far (user + system), in seconds.
    static var cpuSeconds: Double {
        var usage = rusage()
        getrusage(RUSAGE_SELF.rawValue, &usage)
        func seconds(_ t: timeval) -> Double { Double(t.tv_sec) + Double(t.tv_usec) / 1e6 }
        return seconds(usage.ru_utime) + seconds(usage.ru_stime)
    }

    /// Resets the peak to the current RSS (writing 5 to /proc/self/clear_refs, Linux ≥ 4.0).
    static func resetPeak() {
        let fd = open("/proc/self/clear_refs", O_WRONLY)
        guard fd >= 0 else { return }
        _ = write(fd, "5", 1)
        close(fd)
    }
}

/// Collects every round's figures and prints the table, the peer lines and the ratios.
struct Report {
    var figures: [Figure] = []

    /// The median figure per key, by events/s (throughput) or value, keeping its own MB/s.
    func medians() -> [Figure] {
        var order: [String] = []
        var byKey: [String: [Figure]] = [:]
        for figure in figures {
            if byKey[figure.key] == nil { order.append(figure.key) }
            byKey[figure.key, default: []].append(figure)
        }
        return order.map { key in
            let runs = byKey[key]!.sorted { $0.sortValue < $1.sortValue }
            return runs[(runs.count - 1) / 2]  // the middle run (the lower middle for an even count)
        }
    }

    /// The paired ratio beacon/raw for (phase, mode): the median over rounds of each round's ratio.
    func pairedRatio(phase: String, mode: String) -> Double? {
        var ratios: [Double] = []
        let beacon = figures.filter { $0.peer == "beacon" && $0.phase == phase && $0.mode == mode && $0.valueName == nil }
        let raw = figures.filter { $0.peer == "raw" && $0.phase == phase && $0.mode == mode && $0.valueName == nil }
        for (b, r) in zip(beacon, raw) { ratios.append(b.eventsPerSecond / r.eventsPerSecond) }
        return ratios.isEmpty ? nil : median(ratios)
    }

    func print(rounds: Int, header: String) {
        let medians = medians()
        var lines: [String] = [header, ""]
        let throughput = medians.filter { $0.valueName == nil && $0.peer == "beacon" }
        if !throughput.isEmpty {
            lines.append(pad("phase", 6) + pad("mode", 20) + pad("n", 9, right: true) + pad("beacon ev/s", 14, right: true) + pad("MB/s", 9, right: true)
                + pad("raw ev/s", 13, right: true) + pad("MB/s", 9, right: true) + pad("beacon/raw", 12, right: true) + "   ev/s per round")
            for b in throughput {
                guard case .throughput(let n, let bytes, let seconds) = b.kind else { continue }
                let raw = medians.first { $0.peer == "raw" && $0.phase == b.phase && $0.mode == b.mode && $0.valueName == nil }
                var row = pad(b.phase, 6) + pad(b.mode, 20) + pad(grouped(Double(n)), 9, right: true)
                    + pad(grouped(Double(n) / seconds), 14, right: true) + pad(format(Double(bytes) / seconds / 1e6, 1), 9, right: true)
                if let raw, case .throughput(let rn, let rbytes, let rseconds) = raw.kind {
                    row += pad(grouped(Double(rn) / rseconds), 13, right: true) + pad(format(Double(rbytes) / rseconds / 1e6, 1), 9, right: true)
                    row += pad(pairedRatio(phase: b.phase, mode: b.mode).map { format($0, 2) + "×" } ?? "-", 12, right: true)
                } else {
                    row += pad("-", 13, right: true) + pad("-", 9, right: true) + pad("-", 12, right: true)
                }
                let perRound = figures.filter { $0.key == b.key }.map { grouped($0.eventsPerSecond) }.joined(separator: " ")
                row += "   beacon: " + perRound
                if let raw {
                    row += "; raw: " + figures.filter { $0.key == raw.key }.map { grouped($0.eventsPerSecond) }.joined(separator: " ")
                }
                lines.append(row)
            }
            lines.append("")
        }
        for figure in medians where figure.valueName != nil {
            let all = figures.filter { $0.key == figure.key }.map { format($0.sortValue, 2) }.joined(separator: " ")
            let peer = figure.peer == "beacon" ? "" : " (\(figure.peer))"
            lines.append("\(figure.phase) \(figure.valueName!)\(peer): \(format(figure.sortValue, 2)) (median; rounds: \(all))")
        }
        lines.append("")
        for figure in medians { lines.append(figure.peerLine) }
        for b in throughput {
            if let ratio = pairedRatio(phase: b.phase, mode: b.mode) {
                lines.append("ratio=beacon/raw phase=\(b.phase) mode=\(b.mode) value=\(format(ratio, 3))")
            }
        }
        Swift.print(lines.joined(separator: "\n"))
    }

    private func pad(_ text: String, _ width: Int, right: Bool = false) -> String {
        let count = text.count
        if count >= width { return right ? " " + text : text + " " }
        let space = String(repeating: " ", count: width - count)
        return right ? space + text : text + space
    }
}

/// Samples this process's resident memory until stopped and keeps the highest value.
final class PeakSampler: @unchecked Sendable {
    private let lock = NSLock()
    private var peakPages = 0
    private var running = true
    private let done = DispatchSemaphore(value: 0)

    init() {
        sample()
        let thread = Thread { [self] in
            while lock.withLock({ running }) {
                sample()
                usleep(2000)
            }
            done.signal()
        }
        thread.start()
    }

    private func sample() {
        guard let text = try? String(contentsOfFile: "/proc/self/statm", encoding: .utf8) else { return }
        let fields = text.split(separator: " ")
        guard fields.count > 1, let pages = Int(fields[1]) else { return }
        lock.withLock { peakPages = max(peakPages, pages) }
    }

    /// Stops sampling; the peak in MiB.
    func stop() -> Double {
        sample()
        lock.withLock { running = false }
        done.wait()
        return lock.withLock { Double(peakPages * Int(sysconf(Int32(_SC_PAGESIZE)))) / 1_048_576 }
    }
}
