import BeaconLog

/// `beacon verify DIR`: checks every record and the checkpoint.
struct VerifyCommand: Command {
    static let name = "verify"
    static let summary = "Check every record and the checkpoint (read-only)"
    static let usage = """
        beacon verify DIR
          Reads every record of every segment and the checkpoint, taking no lock, and prints each
          problem with its file, byte offset and reason: bad checksums, broken lines, sequence
          gaps, a torn tail, a checkpoint that names no record. With a writer running, an
          incomplete last line may be a write in progress.
          Exit: 0 clean, 1 problems found, 74 I/O error (e.g. DIR does not exist).
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let args = try ParsedArguments(arguments, positionals: 1...1)
        let directory = args.positionals[0]
        try LogOpening.requireDirectory(directory, mayCreate: false)
        let report: VerifyReport
        do {
            report = try BeaconLog.verify(directory: directory)
        } catch {
            throw CLIError(wrapping: error)
        }
        var out = Console.standardOutput
        for problem in report.problems {
            out.write("\(directory)/\(problem)\n")
        }
        let checkpoint = report.checkpoint.map { "checkpoint at \($0)" } ?? "no checkpoint"
        let writer = BeaconLog.lockHolder(.writer, directory: directory).map { pid in
            "; a writer (pid \(pid)) is appending" } ?? ""
        if report.isClean {
            out.write("clean: \(report.records) records in \(report.segments) segments, \(checkpoint)\(writer)\n")
        } else {
            out.write("\(report.problems.count) problems: \(report.records) valid records in \(report.segments) segments, \(checkpoint)\(writer)\n")
        }
        try out.flush()
        return report.isClean ? ExitCode.ok.rawValue : ExitCode.problemFound.rawValue
    }
}
