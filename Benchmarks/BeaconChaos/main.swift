// beacon-chaos: `beacon append` | `beacon send --follow` and a tracker in child processes, killed,
// stopped, terminated and restarted at random against a collector of its own that answers every
// documented way, goes down and stays down long enough to overflow the quota; then a clean drain
// and exact accounting both ways. Exit 0 when the accounting holds, 1 when it does not.
import BeaconTestSupport
import Foundation
import Glibc

let usage = """
    usage: beacon-chaos [--seed S] [--duration D] [--rate N] [--tracker-rate N] [--quota BYTES]
                        [--dir PATH] [--beacon PATH]
      --seed S          the schedule's seed (default: from the clock, printed); the same seed plays
                        the same kills, stops, terms, outages and answers
      --duration D      seconds of chaos before the clean drain: 60, 60s, 4m (default 60)
      --rate N          events appended per second through beacon append (default 300, ~4 KB each)
      --tracker-rate N  events the tracker child tracks per second (default 200)
      --quota BYTES     beacon append --max-disk (default 16777216, the least it takes); each
                        outage lasts until the producer has written this plus 2 MiB
      --dir PATH        keep the data and logs here (default: a temporary directory, removed
                        when the run is clean)
      --beacon PATH     the beacon executable (default: next to this one)
    beacon-chaos --self-test   checks the accounting against made-up outcomes (a clean one
                               passes, each broken one fails) and exits
    Prints one summary line: kills, stops, terms, restarts, answers by kind, produced, delivered,
    dropped, in doubt, set aside, duplicates, first arrivals out of order (and the rule allowing
    them); then each problem found. Exit 0 clean, 1 on any accounting
    failure or misbehaving process, 64 usage, 70 the harness itself failed.
    """

struct ChaosOptions {
    var seed: UInt64 = UInt64(Date().timeIntervalSince1970 * 1000) % 1_000_000
    var duration = 60.0
    var rate = 300
    var trackerRate = 200
    var quota = 16 << 20
    var directory: String?
    var executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    var beacon = ""

    /// Bytes an outage lasts for: the quota and then some, so that the oldest segment is dropped.
    var outageBytes: Int { quota + (2 << 20) }
}

func usageError(_ message: String) -> Never {
    FileHandle.standardError.write(Data("beacon-chaos: \(message)\n\(usage)\n".utf8))
    exit(64)
}

let commandLine = Array(CommandLine.arguments.dropFirst())
switch commandLine.first {
case "--tracker-child": TrackerChild.run(Array(commandLine.dropFirst()))
case "--tracker-drain": TrackerChild.drain(Array(commandLine.dropFirst()))
case "--self-test": ChaosSelfTest.run()
default: break
}

var options = ChaosOptions()
options.beacon = builtProductPath("beacon")
var rest = commandLine[...]
while let argument = rest.popFirst() {
    func value() -> String {
        guard let next = rest.popFirst() else { usageError("\(argument) needs a value") }
        return next
    }
    switch argument {
    case "--seed":
        let text = value()
        guard let seed = UInt64(text) else { usageError("--seed takes a non-negative integer, not '\(text)'") }
        options.seed = seed
    case "--duration":
        let text = value()
        var number = Substring(text)
        var unit = 1.0
        if number.hasSuffix("s") { number = number.dropLast() } else if number.hasSuffix("m") { number = number.dropLast(); unit = 60 }
        guard let seconds = Double(number), seconds * unit >= 10, seconds * unit <= 86_400 else { usageError("--duration takes 10 s to a day: 60, 60s, 4m; not '\(text)'") }
        options.duration = seconds * unit
    case "--rate":
        guard let n = Int(value()), (10...100_000).contains(n) else { usageError("--rate takes 10...100000 events/s") }
        options.rate = n
    case "--tracker-rate":
        guard let n = Int(value()), (10...10_000).contains(n) else { usageError("--tracker-rate takes 10...10000 events/s") }
        options.trackerRate = n
    case "--quota":
        guard let n = Int(value()), n >= 16 << 20 else { usageError("--quota takes bytes, at least 16777216 (what beacon append --max-disk takes)") }
        options.quota = n
    case "--dir": options.directory = value()
    case "--beacon": options.beacon = value()
    case "--help", "-h":
        print(usage)
        exit(0)
    default: usageError("unknown argument \(argument)")
    }
}
guard FileManager.default.isExecutableFile(atPath: options.beacon) else {
    FileHandle.standardError.write(Data("beacon-chaos: no beacon executable at \(options.beacon): build it first (swift build), or name it with --beacon PATH\n".utf8))
    exit(70)
}

signal(SIGPIPE, SIG_IGN)
ChildRegistry.installCleanup()
let directory: String
if let given = options.directory {
    try? FileManager.default.createDirectory(atPath: given, withIntermediateDirectories: true)
    directory = given.hasPrefix("/") ? given : FileManager.default.currentDirectoryPath + "/" + given
} else {
    var template = Array((FileManager.default.currentDirectoryPath + "/.beacon-chaos-XXXXXX").utf8CString)
    guard let made = mkdtemp(&template) else {
        FileHandle.standardError.write(Data("beacon-chaos: cannot create a temporary directory in \(FileManager.default.currentDirectoryPath): \(String(cString: strerror(errno)))\n".utf8))
        exit(70)
    }
    directory = String(cString: made)
}
let report: ChaosReport
do {
    report = try ChaosRun(options, directory: directory).run()
} catch {
    ChildRegistry.killAll()
    FileHandle.standardError.write(Data("beacon-chaos: the harness failed: \(error) (data and logs kept in \(directory))\n".utf8))
    exit(70)
}
print(report.summary)
for problem in report.allProblems { print("  problem: \(problem)") }
if report.allProblems.isEmpty && options.directory == nil {
    try? FileManager.default.removeItem(atPath: directory)
} else {
    print("  data and logs: \(directory)")
}
exit(report.allProblems.isEmpty ? 0 : 1)
