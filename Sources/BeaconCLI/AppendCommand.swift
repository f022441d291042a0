import BeaconLog
import Glibc
import Synchronization

/// `beacon append DIR`: appends standard input, one JSON value per line, as records.
struct AppendCommand: Command {
    static let name = "append"
    static let summary = "Append standard input, one JSON value per line, as records"
    static let usage = """
        beacon append DIR [--sync each|batch|none] [--max-bytes N] [--max-disk N]
          Reads standard input, one JSON value per line, and appends each as a record while holding
          DIR's writer lock (DIR is created if missing). Surrounding whitespace is trimmed. A line
          that is not valid JSON (RFC 8259) or is too large is reported on stderr with its line
          number and reason and is not appended; the others are, and are durable when the
          command exits 0 or 65.
          --sync each    every record is durable (fsync) before the next line is processed
          --sync batch   group commit: one write + fsync every 10 ms (or 10000 records), so a
                         power loss loses at most the last 10 ms of input (default)
          --sync none    no fsync until the end and on segment rolls (fastest; a power loss may
                         lose what the OS had not written back)
          --max-bytes N  the largest record accepted, in bytes (default 1MiB, at most 4MiB)
          --max-disk N   the most disk the segments may use (default 256MiB, at least 16MiB:
                         two 8 MiB segments); beyond it the oldest segment is dropped, counted
                         and reported (status: dropped)
                         Sizes are bytes or take a suffix: KiB, MiB, GiB are powers of 1024;
                         KB, MB, GB (and k, m, g) are powers of 1000
          SIGINT or SIGTERM stop reading: the complete lines read so far are appended and made
          durable, then the command exits with 128 + the signal number (130 for Ctrl-C).
          A failed write or fsync (a full disk, an I/O error) is retried with backoff for up to
          10 s (BEACON_APPEND_RETRY_SECONDS); if it still fails the command exits 74 and says
          which input lines are durable: "lines 1–N are durable; lines N+1… are not: re-run with
          `tail -n +N+1`". Feeding the same input through `tail -n +N+1` to the same command
          appends every line exactly once: nothing lost, nothing twice (lines refused as invalid
          are among the N; they were reported already).
          Exit: 0 every line read is durable, 65 some lines refused (the others are durable),
          74 I/O error, 75 DIR has a writer.
        """

    /// Records handed to `append(contentsOf:)` at once under `--sync batch|none`.
    static let groupSize = 1024

    /// How long a failed write or fsync is retried before giving up: 10 s, or
    /// `BEACON_APPEND_RETRY_SECONDS` (tests set it low).
    static func retryLimit() -> Duration {
        if let text = getenv("BEACON_APPEND_RETRY_SECONDS").map({ String(cString: $0) }), let seconds = Double(text), seconds >= 0 {
            return .milliseconds(Int64(seconds * 1000))
        }
        return .seconds(10)
    }

    static func run(_ arguments: [String]) throws -> Int32 {
        let args = try ParsedArguments(arguments, options: ["--sync", "--max-bytes", "--max-disk"], positionals: 1...1)
        let sync = try args.choice("--sync", ["each", "batch", "none"], default: "batch")
        let maxBytes = try args.size("--max-bytes", default: 1 << 20, in: 1...(4 << 20))
        let maxDisk = try args.size("--max-disk", default: 256 << 20, in: (16 << 20)...Int.max)
        let durability: BeaconLog.Durability = switch sync {
        case "each": .everyRecord
        case "none": .none
        // Time-bound group commit: a pipe delivers thousands of lines per read, and a sync per
        // 100 records (the library default) would cost one fsync per few hundred microseconds.
        default: .batched(records: 10_000, interval: .milliseconds(10))
        }
        Interruption.install()
        let log = try LogOpening.open(args.positionals[0], access: .write) {
            $0.durability = durability
            $0.maxRecordBytes = maxBytes
            $0.maxBytes = Int64(maxDisk)
            // Said at once, not only at the end: a pipe may keep the tool appending for hours.
            let warned = FirstTime()
            $0.onDropped = { records in
                guard warned.claim() else { return }
                Console.writeError("beacon append: the disk quota (--max-disk \(maxDisk) bytes) is full: dropping the oldest pending records (\(records) so far; the total is reported at the end; `beacon status` takes back out those a sender had read and delivers after all); drain more often or raise --max-disk\n")
            }
        }
        let droppedBefore = log.stats.dropped.values.reduce(0, +)
        var appender = LineAppender(log: log, maxRecordBytes: maxBytes, eachDurable: sync == "each", retryFor: retryLimit())
        var dropped: UInt64 = 0
        do {
            try appender.appendLines(from: 0)
            // The last write may still make the quota drop a segment.
            try appender.retrying { try log.close() }
            dropped = log.stats.dropped.values.reduce(0, +) - droppedBefore
        } catch {
            appender.giveUp(after: error)
            return ExitCode.forError(error).rawValue
        }
        if let retried = appender.retriedError {
            appender.stderr.write("beacon append: \(CLIError.describe(retried)); it succeeded when retried, and every line read is durable\n")
        }
        if Interruption.signal != 0 {
            appender.stderr.write("beacon append: interrupted by signal \(Interruption.signal) after \(appender.lineNumber) lines; the \(appender.appended) records appended are durable\n")
            try? appender.stderr.flush()
            return 128 + Interruption.signal
        }
        if dropped > 0 {
            appender.stderr.write("beacon append: the disk quota (--max-disk \(maxDisk) bytes) dropped \(dropped) of the oldest pending records (`beacon status` takes back out those a sender had read and delivered after all); drain more often or raise --max-disk\n")
        }
        if appender.refused > 0 {
            appender.stderr.write("beacon append: appended \(appender.appended) records; refused \(appender.refused) of \(appender.lineNumber) lines\n")
        }
        try? appender.stderr.flush()
        return appender.refused > 0 ? ExitCode.dataError.rawValue : ExitCode.ok.rawValue
    }
}

/// True for the first caller of ``claim()`` only.
final class FirstTime: Sendable {
    private let claimed = Atomic<Bool>(false)
    func claim() -> Bool { !claimed.exchange(true, ordering: .relaxed) }
}

/// Splits a byte stream into lines, validates each as JSON and appends the valid ones.
///
/// Reads with `read(2)` into a 1 MiB buffer (larger when `maxRecordBytes` needs it), finds line
/// ends with `memchr`, and appends in groups of ``AppendCommand/groupSize`` with one
/// `append(contentsOf:)` call (or one `append` per record when each must be durable). Lines are
/// processed as soon as they are complete, so a slow producer is never waited on for a full buffer.
///
/// When the log reports a full disk or an I/O error, it retries for up to `retryFor`, then
/// ``giveUp(after:)`` names the input lines that are durable, from the log's own account.
struct LineAppender {
    let log: BeaconLog
    let maxRecordBytes: Int
    let eachDurable: Bool
    /// How long a failing write or fsync is retried (see ``retrying(_:)``).
    let retryFor: Duration
    /// Lines seen so far (the number of the line being handled).
    private(set) var lineNumber = 0
    /// Records appended.
    private(set) var appended = 0
    /// Lines refused.
    private(set) var refused = 0
    /// The last error that a retry overcame, to mention on exit.
    private(set) var retriedError: (any Error)?
    /// The input line of each valid record, in order, appended or about to be.
    private(set) var ledger = LineLedger()
    /// The log's next sequence number when appending started: record k gets `firstSeq + k`.
    let firstSeq: UInt64
    /// Diagnostics for refused lines.
    var stderr = Console(fd: 2, capacity: 64 * 1024)
    private var group: [[UInt8]] = []

    init(log: BeaconLog, maxRecordBytes: Int, eachDurable: Bool, retryFor: Duration = .zero) {
        self.log = log
        self.maxRecordBytes = maxRecordBytes
        self.eachDurable = eachDurable
        self.retryFor = retryFor
        self.firstSeq = log.stats.nextSeq
        group.reserveCapacity(AppendCommand.groupSize)
    }

    /// Reads `fd` to its end, appending every valid line.
    mutating func appendLines(from fd: Int32) throws {
        let capacity = max(1 << 20, 2 * maxRecordBytes + 64 * 1024)
        let buffer = UnsafeMutablePointer<UInt8>.allocate(capacity: capacity)
        defer { buffer.deallocate() }
        var start = 0  // first unprocessed byte
        var end = 0  // end of data read
        var skipping = false  // inside a line too long to hold; dropping bytes to its end
        var skippedBytes = 0
        while true {
            if Interruption.signal != 0 {
                try flushGroup()
                return
            }
            let n = read(fd, buffer + end, capacity - end)
            if n < 0 {
                if errno == EINTR {
                    if Interruption.signal != 0 {
                        // Ctrl-C or SIGTERM: the incomplete last line is dropped; all complete ones are kept.
                        try flushGroup()
                        return
                    }
                    continue
                }
                throw CLIError(.ioError, "cannot read standard input: \(String(cString: strerror(errno)))")
            }
            if n == 0 { break }
            end += n
            var scan = end - n  // bytes before this were already searched for a newline
            while let hit = memchr(buffer + scan, 0x0A, end - scan) {
                let newline = buffer.distance(to: hit.assumingMemoryBound(to: UInt8.self))
                if skipping {
                    lineNumber += 1
                    refuseTooLong(bytes: skippedBytes + newline - start)
                    skipping = false
                } else {
                    try handleLine(UnsafeBufferPointer(start: buffer + start, count: newline - start))
                }
                start = newline + 1
                scan = start
            }
            if start == end {
                start = 0
                end = 0
            } else if end == capacity {
                if start == 0 {
                    // No newline in a full buffer: the line is longer than any record we accept.
                    skipping = true
                    skippedBytes += end
                    end = 0
                } else {
                    memmove(buffer, buffer + start, end - start)
                    end -= start
                    start = 0
                }
            }
            // Append what this read completed, and report what it refused, before blocking in the next one.
            try flushGroup()
            if !stderr.buffer.isEmpty { try? stderr.flush() }
        }
        if skipping {
            lineNumber += 1
            refuseTooLong(bytes: skippedBytes + end - start)
        } else if end > start {
            try handleLine(UnsafeBufferPointer(start: buffer + start, count: end - start))
        }
        try flushGroup()
    }

    /// Validates one line (without its newline) and appends it or reports why not.
    mutating func handleLine(_ line: UnsafeBufferPointer<UInt8>) throws {
        lineNumber += 1
        var lower = 0
        var upper = line.count
        while lower < upper, Self.isSpace(line[lower]) { lower += 1 }
        while upper > lower, Self.isSpace(line[upper - 1]) { upper -= 1 }
        let value = UnsafeBufferPointer(rebasing: line[lower..<upper])
        if value.count > maxRecordBytes {
            refuseTooLong(bytes: value.count)
            return
        }
        if let failure = JSONValidator.validate(value) {
            refused += 1
            stderr.write("beacon append: line \(lineNumber): not JSON: \(failure.describe(columnOffset: lower))\n")
            return
        }
        ledger.add(line: lineNumber)
        if eachDurable {
            let log = self.log
            try appendRetrying(records: 1) { try log.append(UnsafeRawBufferPointer(value)) }
        } else {
            group.append(Array(value))
            if group.count >= AppendCommand.groupSize { try flushGroup() }
        }
    }

    /// Appends the collected group with one call.
    mutating func flushGroup() throws {
        guard !group.isEmpty else { return }
        let group = self.group
        let log = self.log
        try appendRetrying(records: group.count) { try log.append(contentsOf: group) }
        self.group.removeAll(keepingCapacity: true)
    }

    /// Runs `append`, which appends `records` records, retrying while the disk refuses: a record
    /// the log accepted but could not write yet (`keptSeqs`) is not appended again, only synced.
    mutating func appendRetrying(records: Int, _ append: () throws -> Void) throws {
        var accepted = false
        defer { if accepted { appended += records } }
        let log = self.log
        let retried = try Self.retry(for: retryFor) {
            if accepted {
                try log.sync()
                return
            }
            do {
                try append()
            } catch let error as BeaconLogError where error.keptSeqs != nil {
                accepted = true
                throw error
            }
            accepted = true
        }
        if let retried { retriedError = retried }
    }

    /// Runs `body` until it succeeds, retrying while it fails with a full disk or an I/O error,
    /// for at most ``retryFor`` (see ``retry(for:_:)``).
    mutating func retrying(_ body: () throws -> Void) throws {
        if let retried = try Self.retry(for: retryFor, body) { retriedError = retried }
    }

    /// Runs `body` until it succeeds, retrying with backoff (10 ms doubling to 1 s) while it fails
    /// with a full disk or an I/O error, for at most `limit`; then throws its last error. A signal
    /// (Ctrl-C) stops the retries. Returns the last error a retry overcame, if any.
    static func retry(for limit: Duration, _ body: () throws -> Void) throws -> (any Error)? {
        let deadline = ContinuousClock.now + limit
        var delay = Duration.milliseconds(10)
        var retried: (any Error)?
        while true {
            do {
                try body()
                return retried
            } catch let error as BeaconLogError where error.code == .diskFull || error.code == .io {
                if ContinuousClock.now + delay > deadline || Interruption.signal != 0 { throw error }
                retried = error
                usleep(UInt32(clamping: delay.nanoseconds / 1000))
                delay = min(delay * 2, .seconds(1))
            }
        }
    }

    /// After an error that retrying did not overcome: makes one last attempt to close the log,
    /// then drops what is still not durable (this process is about to exit, and its memory with
    /// it) and says which input lines are durable and where to resume.
    mutating func giveUp(after error: any Error) {
        try? log.close()
        let exact = log.abandon()
        let durable = log.stats.durableSeq.map { $0 >= firstSeq ? Int($0 - firstSeq + 1) : 0 } ?? 0
        let lines = durableLines(durableRecords: durable)
        stderr.write("beacon append: \(CLIError.describe(error))\n")
        stderr.write("beacon append: \(Self.resumeAdvice(durableLines: lines))\n")
        if !exact {
            stderr.write("beacon append: the records after line \(lines) could not be cut off the log: some of them may be in it; check with `beacon cat` before re-running\n")
        }
        try? stderr.flush()
    }

    /// How many input lines, from the first, are handled for good: each is a durable record or was
    /// refused. The first record that is not durable ends them; with every record durable, every
    /// line read so far counts.
    func durableLines(durableRecords: Int) -> Int {
        durableRecords < ledger.records ? ledger.line(ofRecord: durableRecords) - 1 : lineNumber
    }

    /// "lines 1–N are durable; lines N+1… are not: re-run with `tail -n +N+1`".
    static func resumeAdvice(durableLines n: Int) -> String {
        if n == 0 { return "no input line is durable; lines 1… are not: re-run with `tail -n +1` (all of the input)" }
        return "lines 1–\(n) are durable; lines \(n + 1)… are not: re-run with `tail -n +\(n + 1)`"
    }

    mutating func refuseTooLong(bytes: Int) {
        refused += 1
        stderr.write("beacon append: line \(lineNumber): too large: \(bytes) bytes, more than the limit of \(maxRecordBytes) (--max-bytes)\n")
    }

    @inline(__always) static func isSpace(_ b: UInt8) -> Bool {
        b == 0x20 || b == 0x09 || b == 0x0D
    }
}

/// The input line of every valid record, stored as the few places where line numbers stop
/// following record numbers one to one (a refused line), so a long input costs no memory per line.
struct LineLedger {
    /// (record index, its line) where a run of consecutive lines starts.
    private var runs: [(record: Int, line: Int)] = []
    /// Records noted so far.
    private(set) var records = 0

    /// Notes that the next record comes from input line `line`.
    mutating func add(line: Int) {
        if let last = runs.last, last.line + (records - last.record) == line {
            records += 1
            return
        }
        runs.append((records, line))
        records += 1
    }

    /// The input line of record `index` (0-based, below ``records``).
    func line(ofRecord index: Int) -> Int {
        var low = 0
        var high = runs.count - 1
        while low < high {  // the last run starting at or before `index`
            let mid = (low + high + 1) / 2
            if runs[mid].record <= index { low = mid } else { high = mid - 1 }
        }
        return runs[low].line + (index - runs[low].record)
    }
}
