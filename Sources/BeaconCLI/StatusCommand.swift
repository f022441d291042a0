import Foundation
import Beacon
import BeaconLog

/// `beacon status DIR`: counters and sizes, for people or as JSON.
struct StatusCommand: Command {
    static let name = "status"
    static let summary = "Show pending records, sizes, loss counters and lock holders (read-only)"
    static let usage = """
        beacon status DIR [--json]
          Prints a summary of the log: pending records and bytes, the age of the oldest pending
          event (found with one small read at the checkpoint), the acknowledged and next
          sequence numbers, segments and disk use, loss counters, and which processes hold the
          writer and reader locks. Takes no lock and writes nothing.
          --json   print one JSON object instead, with the keys pending_records, pending_bytes,
                   acked_seq (null if nothing was acknowledged), next_seq, segments, disk_bytes,
                   dropped and refused (objects: reason -> count), corrupt_skipped, checkpoint
                   ({segment, offset, seq}), writer_pid and reader_pid (null when unlocked),
                   oldest_pending_age_seconds (null when nothing is pending) and
                   oldest_pending_age_source ("time": the event's time field; "appended": the
                   record has none, the age of the segment it was appended to, an upper bound)
          Exit: 0 ok, 74 I/O error (e.g. DIR does not exist).
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let args = try ParsedArguments(arguments, flags: ["--json"], positionals: 1...1)
        let directory = args.positionals[0]
        let log = try LogOpening.open(directory, access: .readOnly)
        var stats = log.stats
        let checkpoint = log.checkpoint
        // A writer without the reader lock cannot move the checkpoint when the quota drops
        // segments, so the checkpoint's seq may lie before the oldest record on disk; BeaconLog then
        // counts the dropped records as pending too (an upper bound). Count from the oldest record.
        if let oldest = try log.read(from: log.oldestPosition, maxRecords: 1).seqs.first, oldest > checkpoint.seq {
            stats.pendingRecords = stats.nextSeq > oldest ? stats.nextSeq - oldest : 0
        }
        let age = stats.pendingRecords == 0 ? nil : BeaconMetrics.PendingAge.of(log, nowMillis: Int64((Date().timeIntervalSince1970 * 1000).rounded(.down)))
        try log.close()
        let writer = BeaconLog.lockHolder(.writer, directory: directory)
        let reader = BeaconLog.lockHolder(.reader, directory: directory)
        var out = Console.standardOutput
        if args.has("--json") {
            out.write(json(stats, age: age, checkpoint: checkpoint, writer: writer, reader: reader) + "\n")
        } else {
            out.write(text(directory, stats, age: age, checkpoint: checkpoint, writer: writer, reader: reader))
        }
        try out.flush()
        return ExitCode.ok.rawValue
    }

    /// The `--json` object, on one line, keys in a fixed order.
    static func json(_ stats: LogStats, age: BeaconMetrics.PendingAge? = nil, checkpoint: LogPosition, writer: Int32?, reader: Int32?) -> String {
        func object<Reason: CustomStringConvertible>(_ typed: [Reason: UInt64]) -> String {
            let counts = typed.map { (key: $0.key.description, value: $0.value) }
            return "{" + counts.sorted { $0.key < $1.key }.map { "\(JSONBytes.quoted($0.key)):\($0.value)" }.joined(separator: ",") + "}"
        }
        func number<T: BinaryInteger>(_ value: T?) -> String { value.map { "\($0)" } ?? "null" }
        let fields: [(String, String)] = [
            ("pending_records", "\(stats.pendingRecords)"),
            ("pending_bytes", "\(stats.pendingBytes)"),
            ("acked_seq", number(stats.acknowledgedSeq)),
            ("next_seq", "\(stats.nextSeq)"),
            ("segments", "\(stats.segments)"),
            ("disk_bytes", "\(stats.diskBytes)"),
            ("dropped", object(stats.dropped)),
            ("refused", object(stats.refused)),
            ("corrupt_skipped", "\(stats.skippedCorrupt)"),
            ("corrupt_skipped_by_reason", object(stats.skippedCorruptByReason)),
            ("checkpoint", #"{"segment":\#(checkpoint.segment),"offset":\#(checkpoint.offset),"seq":\#(checkpoint.seq)}"#),
            ("writer_pid", number(writer)),
            ("reader_pid", number(reader)),
            ("oldest_pending_age_seconds", age.map { seconds($0.age) } ?? "null"),
            ("oldest_pending_age_source", age.map { "\"\($0.source.rawValue)\"" } ?? "null"),
        ]
        return "{" + fields.map { "\"\($0.0)\":\($0.1)" }.joined(separator: ",") + "}"
    }

    /// The human summary.
    static func text(_ directory: String, _ stats: LogStats, age: BeaconMetrics.PendingAge? = nil, checkpoint: LogPosition, writer: Int32?, reader: Int32?) -> String {
        func counts<Reason: CustomStringConvertible>(_ typed: [Reason: UInt64]) -> String {
            let counts = typed.map { (key: $0.key.description, value: $0.value) }
            let total = counts.reduce(0) { $0 + $1.value }
            if total == 0 { return "0" }
            return "\(total) (" + counts.sorted { $0.key < $1.key }.map { "\($0.key) \($0.value)" }.joined(separator: ", ") + ")"
        }
        func holder(_ pid: Int32?) -> String {
            guard let pid else { return "free" }
            return pid > 0 ? "held by pid \(pid)" : "held (pid unknown)"
        }
        return """
            log \(directory)
              pending:       \(stats.pendingRecords) records, \(bytes(stats.pendingBytes))
              oldest:        \(oldest(age))
              acknowledged:  \(stats.acknowledgedSeq.map { "through seq \($0)" } ?? "nothing yet")
              next seq:      \(stats.nextSeq)
              checkpoint:    \(checkpoint)
              segments:      \(stats.segments), \(bytes(stats.diskBytes)) on disk
              dropped:       \(counts(stats.dropped))
              refused:       \(counts(stats.refused))
              corrupt:       \(counts(stats.skippedCorruptByReason)) records passed over
              writer lock:   \(holder(writer))
              reader lock:   \(holder(reader))

            """
    }

    /// `12.345`: seconds with millisecond precision.
    static func seconds(_ duration: Duration) -> String {
        let millis = duration.components.seconds * 1000 + duration.components.attoseconds / 1_000_000_000_000_000
        let fraction = String(millis % 1000)
        return "\(millis / 1000)." + String(repeating: "0", count: 3 - fraction.count) + fraction
    }

    /// The oldest pending event's age for people: `pending for 1h 02m 03s (seq 41, by its time field)`.
    static func oldest(_ age: BeaconMetrics.PendingAge?) -> String {
        guard let age else { return "nothing pending" }
        let total = age.age.components.seconds
        let (h, m, s) = (total / 3600, total % 3600 / 60, total % 60)
        func two(_ n: Int64) -> String { n < 10 ? "0\(n)" : "\(n)" }
        let span = h > 0 ? "\(h)h \(two(m))m \(two(s))s" : m > 0 ? "\(m)m \(two(s))s" : "\(seconds(age.age)) s"
        let source = age.source == .eventTime ? "by its time field" : "no time field: since its segment was created, at most"
        return "seq \(age.seq), \(span) old (\(source))"
    }

    /// `1234567` → "1234567 bytes (1.2 MiB)".
    static func bytes(_ count: UInt64) -> String {
        if count < 1024 { return "\(count) bytes" }
        let units = ["KiB", "MiB", "GiB", "TiB"]
        var value = Double(count) / 1024
        var unit = 0
        while value >= 1024 && unit < units.count - 1 {
            value /= 1024
            unit += 1
        }
        let tenths = Int((value * 10).rounded())
        return "\(count) bytes (\(tenths / 10).\(tenths % 10) \(units[unit]))"
    }
}
