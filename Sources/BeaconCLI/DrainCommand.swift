import BeaconLog
import Glibc

/// `beacon drain DIR`: writes pending records to stdout and acknowledges them once written.
struct DrainCommand: Command {
    static let name = "drain"
    static let summary = "Print pending records and acknowledge them (at least once)"
    static let usage = """
        beacon drain DIR [--batch N]
          Writes the pending records' event JSON to standard output, one per line, and
          acknowledges each batch only after its lines were written and flushed (and, when
          standard output is a regular file, fdatasync'ed), holding DIR's reader lock. Stops when
          no records are pending. A crash in between prints a batch again: at least once.
          Example: beacon drain DIR | kcat -P -b broker -t events
          --batch N   records per batch, one durable acknowledgement each (default 10000;
                      after a crash at most one batch is printed again)
          Exit: 0 ok, 1 corrupt records were passed over, 74 I/O error (e.g. the pipe closed;
          the unwritten batch stays pending), 75 DIR has a reader.
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let args = try ParsedArguments(arguments, options: ["--batch"], positionals: 1...1)
        let batchSize = try args.integer("--batch", default: 10_000, in: 1...1_000_000)
        let log = try LogOpening.open(args.positionals[0], access: .read)
        defer { try? log.close() }
        var out = Console(fd: 1, capacity: 1 << 20)
        let syncOutput = isRegularFile(1)
        var drained = 0
        var skipped = 0
        do {
            while true {
                let batch = try log.read(maxRecords: batchSize, maxBytes: 16 << 20)
                skipped += batch.skippedCorrupt
                if batch.isEmpty { break }
                for record in batch.records { out.writeLine(record) }
                try out.flush()
                if syncOutput && fdatasync(1) != 0 {
                    throw CLIError(.ioError, "cannot fdatasync standard output: \(String(cString: strerror(errno))); the batch stays pending")
                }
                try log.acknowledge(through: batch.end)
                drained += batch.count
            }
            try log.close()
        } catch {
            throw CLIError(ExitCode.forError(error), "stopped after \(drained) records: \(CLIError.describe(error))")
        }
        if skipped > 0 {
            Console.writeError("beacon drain: passed over \(skipped) corrupt records (bad checksum or broken line) after \(drained) records; run 'beacon verify \(args.positionals[0])' for where\n")
            return ExitCode.problemFound.rawValue
        }
        return ExitCode.ok.rawValue
    }

    /// Whether `fd` is a regular file (then its data can be fsynced before acknowledging).
    static func isRegularFile(_ fd: Int32) -> Bool {
        var info = stat()
        return fstat(fd, &info) == 0 && (info.st_mode & S_IFMT) == S_IFREG
    }
}
