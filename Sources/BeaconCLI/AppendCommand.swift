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
          number and reason and is not appended; the others are. Everything appended is durable
          when the command exits.
          --sync each    every record is durable (fsync) before the next line is processed
          --sync batch   group commit: one write + fsync every 10 ms (or 10000 records), so a
                         power loss loses at most the last 10 ms of input (default)
          --sync none    no fsync until the end and on segment rolls (fastest; a power loss may
                         lose what the OS had not written back)
          --max-bytes N  the largest record accepted, in bytes (default 1MiB; suffixes KiB, MiB)
          --max-disk N   the most disk the segments may use (default 256MiB); beyond it the
                         oldest segment is dropped, counted and reported (status: dropped)
          SIGINT or SIGTERM stop reading: the complete lines read so far are appended and made
          durable, then the command exits with 128 + the signal number (130 for Ctrl-C).
          Exit: 0 all lines appended, 65 some lines refused, 74 I/O error, 75 DIR has a writer.
        """

    /// Records handed to `append(contentsOf:)` at once under `--sync batch|none`.
    static let groupSize = 1024

    static func run(_ arguments: [String]) throws -> Int32 {
        let args = try ParsedArguments(arguments, options: ["--sync", "--max-bytes", "--max-disk"], positionals: 1...1)
        let sync = try args.choice("--sync", ["each", "batch", "none"], default: "batch")
        let maxBytes = try args.integer("--max-bytes", default: 1 << 20, in: 1...(4 << 20))
        let maxDisk = try args.integer("--max-disk", default: 256 << 20, in: (16 << 20)...Int.max)
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
                Console.writeError("beacon append: the disk quota (--max-disk \(maxDisk) bytes) is full: dropping the oldest pending records, never delivered (\(records) so far; the total is reported at the end); drain more often or raise --max-disk\n")
            }
        }
        let droppedBefore = log.stats.dropped.values.reduce(0, +)
        var appender = LineAppender(log: log, maxRecordBytes: maxBytes, eachDurable: sync == "each")
        var dropped: UInt64 = 0
        do {
            try appender.appendLines(from: 0)
            try log.close()  // the last write may still make the quota drop a segment
            dropped = log.stats.dropped.values.reduce(0, +) - droppedBefore
        } catch {
            try? appender.flushGroup()
            try? log.close()
            appender.stderr.write("beacon append: stopped at line \(appender.lineNumber) after appending \(appender.appended) records: \(CLIError.describe(error))\n")
            try? appender.stderr.flush()
            return ExitCode.forError(error).rawValue
        }
        if Interruption.signal != 0 {
            appender.stderr.write("beacon append: interrupted by signal \(Interruption.signal) after \(appender.lineNumber) lines; the \(appender.appended) records appended are durable\n")
            try? appender.stderr.flush()
            return 128 + Interruption.signal
        }
        if dropped > 0 {
            appender.stderr.write("beacon append: the disk quota (--max-disk \(maxDisk) bytes) dropped \(dropped) of the oldest pending records; drain more often or raise --max-disk\n")
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
struct LineAppender {
    let log: BeaconLog
    let maxRecordBytes: Int
    let eachDurable: Bool
    /// Lines seen so far (the number of the line being handled).
    private(set) var lineNumber = 0
    /// Records appended.
    private(set) var appended = 0
    /// Lines refused.
    private(set) var refused = 0
    /// Diagnostics for refused lines.
    var stderr = Console(fd: 2, capacity: 64 * 1024)
    private var group: [[UInt8]] = []

    init(log: BeaconLog, maxRecordBytes: Int, eachDurable: Bool) {
        self.log = log
        self.maxRecordBytes = maxRecordBytes
        self.eachDurable = eachDurable
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
        if eachDurable {
            try log.append(UnsafeRawBufferPointer(value))
            appended += 1
        } else {
            group.append(Array(value))
            if group.count >= AppendCommand.groupSize { try flushGroup() }
        }
    }

    /// Appends the collected group with one call.
    mutating func flushGroup() throws {
        guard !group.isEmpty else { return }
        try log.append(contentsOf: group)
        appended += group.count
        group.removeAll(keepingCapacity: true)
    }

    mutating func refuseTooLong(bytes: Int) {
        refused += 1
        stderr.write("beacon append: line \(lineNumber): too large: \(bytes) bytes, more than the limit of \(maxRecordBytes) (--max-bytes)\n")
    }

    @inline(__always) static func isSpace(_ b: UInt8) -> Bool {
        b == 0x20 || b == 0x09 || b == 0x0D
    }
}
