import BeaconLog

/// `beacon cat DIR`: prints records without acknowledging them.
struct CatCommand: Command {
    static let name = "cat"
    static let summary = "Print pending records without acknowledging (read-only)"
    static let usage = """
        beacon cat DIR [--all]
          Prints the pending records' event JSON, one per line, without acknowledging them. Takes
          no lock and writes nothing, so it works while another process appends or drains (it
          shows a consistent prefix).
          --all   also print acknowledged records whose segment is still on disk
          Exit: 0 ok, 1 corrupt records were passed over, 74 I/O error.
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let args = try ParsedArguments(arguments, flags: ["--all"], positionals: 1...1)
        let log = try LogOpening.open(args.positionals[0], access: .readOnly)
        defer { try? log.close() }
        var out = Console(fd: 1, capacity: 1 << 20)
        var cursor: LogPosition? = args.has("--all") ? log.oldestPosition : nil
        var skipped = 0
        while true {
            let batch = try log.read(from: cursor, maxRecords: 4096, maxBytes: 8 << 20)
            skipped += batch.skippedCorrupt
            if batch.isEmpty { break }
            for record in batch.records { out.writeLine(record) }
            cursor = batch.end
        }
        try out.flush()
        if skipped > 0 {
            Console.writeError("beacon cat: passed over \(skipped) corrupt records (bad checksum or broken line); run 'beacon verify \(args.positionals[0])' for where\n")
            return ExitCode.problemFound.rawValue
        }
        return ExitCode.ok.rawValue
    }
}
