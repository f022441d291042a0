// beacon-bench: a fixed workload (append, drain, open, track, upload, end to end) through the public API, against a
// raw baseline on the same file system, median of rounds. `swift run -c release beacon-bench`.
import Foundation
import Glibc

/// Every phase, in the order a round runs them. One line per phase.
var benchPhases: [any BenchPhase.Type] {
    [
        AppendPhase.self,
        DrainPhase.self,
        OpenPhase.self,
        TrackPhase.self,
        StallPhase.self,
        UploadPhase.self,
        SidecarPhase.self,
        EndToEndPhase.self,
        DistancePhase.self,
    ]
}

/// Phases run only when named with `--phase` (long runs: never in the default set nor in `--quick`).
var namedOnlyPhases: [any BenchPhase.Type] { [SoakPhase.self, PacedPhase.self] }

let usage = """
    usage: beacon-bench [--quick] [--phase NAME]... [--append-mode MODE]... [--rounds N] [--dir PATH]
                        [--soak-seconds S] [--soak-rate N] [--soak-backlog N] [--soak-transport T]
                        [--upload-mode MODE]... [--paced-seconds S] [--paced-rate N]...
                        [--paced-interval-ms T]
      --quick       small N for a smoke run (seconds; CI runs it)
      --phase NAME  run only this phase (repeatable); phases:
    \((benchPhases + namedOnlyPhases).map { "                  \($0.name): \($0.summary)" }.joined(separator: "\n"))
      --append-mode MODE  phase A: run only this mode (none, group100, each; repeatable)
      --rounds N    rounds; each figure is the median (default 3, 1 with --quick or when only
                    named-only phases run)
      --soak-seconds S  soak: how long the tracker tracks at the steady rate (default 180; 8 with --quick)
      --soak-rate N     soak: events tracked per second, paced (default 20000; 5000 with --quick)
      --soak-backlog N  soak: events of the backlog tracked afterwards as fast as possible and
                        drained (default 500000; 20000 with --quick; 0 skips it)
      --soak-transport T  soak: the tracker's transport, default (the library's: socket for this
                          http collector), urlsession or socket
      --upload-mode MODE  upload: run only this mode and its keep-alive loop (repeatable), such as
                          nginx_batch50, batch500_gzip, instant_batch50 (default: every mode)
      --paced-seconds S  paced: how long each rate runs, with and without Beacon (default 10; 1 with --quick)
      --paced-rate N    paced: run only this rate, events/s (repeatable; default 1000, 10000, 50000, 100000)
      --paced-interval-ms T  paced: the tracker's durability .batched(records: 100, interval: T ms)
                        instead of the default policy (100 records or 10 ms): what a longer commit
                        interval saves
      --dir PATH    where the data goes (default: a new .beacon-bench-XXXXXX in the working
                    directory, on its file system, removed afterwards)
    """

func fail(_ message: String, code: Int32 = 64) -> Never {
    FileHandle.standardError.write(Data("beacon-bench: \(message)\n".utf8))
    exit(code)
}

// A collector child process (see BenchCollector), started by the upload and endtoend phases.
if CommandLine.arguments.dropFirst().first == "--serve-collector" {
    BenchCollector.serve(Array(CommandLine.arguments.dropFirst(2)))
}

var quick = false
var phaseNames: [String] = []
var appendModes: Set<String> = []
var rounds: Int?
var dirArgument: String?
var soakOptions = SoakOptions()
var uploadModes: Set<String> = []
var pacedSeconds: Double?
var pacedRates: [Int] = []
var pacedInterval: Int?
var arguments = Array(CommandLine.arguments.dropFirst())[...]
while let argument = arguments.popFirst() {
    var name = argument
    var inline: String?
    if let equals = argument.firstIndex(of: "="), argument.hasPrefix("--") {
        name = String(argument[..<equals])
        inline = String(argument[argument.index(after: equals)...])
    }
    func value() -> String {
        if let inline { return inline }
        guard let next = arguments.popFirst() else { fail("\(name) needs a value\n\(usage)") }
        return next
    }
    switch name {
    case "--quick": quick = true
    case "--phase": phaseNames.append(value())
    case "--append-mode":
        let text = value()
        guard ["none", "group100", "each"].contains(text) else { fail("--append-mode must be none, group100 or each, not '\(text)'") }
        appendModes.insert(text)
    case "--rounds":
        let text = value()
        guard let n = Int(text), n >= 1, n <= 100 else { fail("--rounds must be 1...100, not '\(text)'") }
        rounds = n
    case "--dir": dirArgument = value()
    case "--soak-seconds":
        let text = value()
        guard let seconds = Double(text), seconds >= 1, seconds <= 86_400 else { fail("--soak-seconds must be 1...86400, not '\(text)'") }
        soakOptions.seconds = seconds
    case "--soak-rate":
        let text = value()
        guard let n = Int(text), n >= 1, n <= 10_000_000 else { fail("--soak-rate must be 1...10000000 events/s, not '\(text)'") }
        soakOptions.rate = n
    case "--soak-backlog":
        let text = value()
        guard let n = Int(text), n >= 0, n <= 100_000_000 else { fail("--soak-backlog must be 0...100000000 events, not '\(text)'") }
        soakOptions.backlog = n
    case "--soak-transport":
        let text = value()
        guard ["default", "urlsession", "socket"].contains(text) else { fail("--soak-transport must be default, urlsession or socket, not '\(text)'") }
        soakOptions.transport = text
    case "--upload-mode": uploadModes.insert(value())
    case "--paced-seconds":
        let text = value()
        guard let seconds = Double(text), seconds >= 0.1, seconds <= 3600 else { fail("--paced-seconds must be 0.1...3600, not '\(text)'") }
        pacedSeconds = seconds
    case "--paced-rate":
        let text = value()
        guard let rate = Int(text), rate >= 10, rate <= 1_000_000 else { fail("--paced-rate must be 10...1000000 events/s, not '\(text)'") }
        pacedRates.append(rate)
    case "--paced-interval-ms":
        let text = value()
        guard let ms = Int(text), ms >= 1, ms <= 10_000 else { fail("--paced-interval-ms must be 1...10000, not '\(text)'") }
        pacedInterval = ms
    case "--help", "-h":
        print(usage)
        exit(0)
    default: fail("unknown argument \(argument)\n\(usage)")
    }
}
let allPhases = benchPhases + namedOnlyPhases
for name in phaseNames where !allPhases.contains(where: { $0.name == name }) {
    fail("unknown phase '\(name)'; phases: \(allPhases.map { $0.name }.joined(separator: ", "))")
}
let selected = phaseNames.isEmpty ? benchPhases : allPhases.filter { phaseNames.contains($0.name) }
let onlyNamedOnly = selected.allSatisfy { phase in namedOnlyPhases.contains { $0.name == phase.name } }
let roundCount = rounds ?? (quick || onlyNamedOnly ? 1 : 3)

// The data directory: on the working directory's file system unless --dir says otherwise.
let directory: String
let removeAfterwards: Bool
if let dirArgument {
    try? FileManager.default.createDirectory(atPath: dirArgument, withIntermediateDirectories: true)
    directory = dirArgument.hasPrefix("/") ? dirArgument : FileManager.default.currentDirectoryPath + "/" + dirArgument
    removeAfterwards = false
} else {
    var template = Array((FileManager.default.currentDirectoryPath + "/.beacon-bench-XXXXXX").utf8CString)
    guard let made = mkdtemp(&template) else { fail("cannot create a temporary directory in the working directory: \(String(cString: strerror(errno)))", code: 74) }
    directory = String(cString: made)
    removeAfterwards = true
}
/// The 1-minute load average: figures taken on a busy machine (load above the core count) are low.
func loadAverage() -> String {
    (try? String(contentsOfFile: "/proc/loadavg", encoding: .utf8))?.split(separator: " ").first.map(String.init) ?? "?"
}
let loadAtStart = loadAverage()
let context = BenchContext(quick: quick, directory: directory)
context.soak = soakOptions
context.appendModes = appendModes
context.uploadModes = uploadModes
context.pacedSeconds = pacedSeconds
context.pacedRates = pacedRates
context.pacedIntervalMilliseconds = pacedInterval
var report = Report()
var ok = true
do {
    for round in 1...roundCount {
        context.round = round
        for phase in selected {
            if !phase.usesPayloads { context.releasePayloads() }
            let start = now()
            let figures = try phase.runRound(context)
            report.figures += figures
            FileHandle.standardError.write(Data("round \(round)/\(roundCount) phase \(phase.name): \(format(now() - start, 1)) s\n".utf8))
        }
    }
} catch {
    FileHandle.standardError.write(Data("beacon-bench: \(error)\n".utf8))
    ok = false
}
// What was made here goes; a --dir given by the user keeps only itself.
if removeAfterwards {
    try? FileManager.default.removeItem(atPath: directory)
} else {
    for name in (try? FileManager.default.contentsOfDirectory(atPath: directory)) ?? [] where name.hasPrefix("beacon-") || name.hasPrefix("raw-") {
        try? FileManager.default.removeItem(atPath: directory + "/" + name)
    }
}
#if DEBUG
let build = "debug build: figures are not meaningful; use swift run -c release beacon-bench"
#else
let build = "release build"
#endif
let header = """
    beacon-bench: the workload\(quick ? " (--quick: small N, a smoke run)" : ""), \(roundCount) round\(roundCount == 1 ? "" : "s"), median by events/s; \(build)
    data: \(directory) (removed afterwards: \(removeAfterwards ? "yes" : "no, only its contents"))
    machine: \(ProcessInfo.processInfo.activeProcessorCount) cores, load average \(loadAtStart) at the start, \(loadAverage()) at the end
    beacon: BeaconLog public API, one append call per event, segments 8 MiB (preallocated with fallocate under group100 and
            each; under none the writeback of each MiB started with sync_file_range), fdatasync(2) per commit, checkpoint in place (pwrite + fdatasync, two slots); raw: 64 KiB buffer + write(2) + fdatasync(2), B: in-place pwrite + fdatasync
    upload, endtoend: the collector is a child process (loopback, and nginx when installed: modes nginx_*); raw: a raw keep-alive
            loop (one connection, one request in flight, the same prebuilt bodies, minimal headers; the limit of the shape);
            ref_urlsession_loop_*: a plain URLSession loop (not Beacon); peak RSS is this process's (payloads included)
    """
report.print(rounds: roundCount, header: header)
exit(ok ? 0 : 1)
