import BeaconLog
import Foundation
import Synchronization

/// `rejected.jsonl` in the log directory: one line per event set aside, never re-sent
/// automatically. Each line is
/// `{"status":400,"reason":"…","seq":12,"rejected_at":<epoch ms>,"record":<the event, verbatim>}`
/// (`"status":null` for expired events). Appended and fsynced (through the log's file-system seam)
/// before the events are acknowledged, so an event is in the log or in this file, never in
/// neither; a failed append leaves the file as it was, so a retry does not write a line twice.
struct RejectedFile {
    static let fileName = "rejected.jsonl"
    /// The file, reached through the log directory's descriptor.
    let location: LogPath
    var path: String { location.path }
    let fileSystem: any FileSystem

    /// The file in `directory`, reached through its descriptor (a link there is refused).
    init(directory: LogDirectory, fileSystem: any FileSystem) {
        location = directory.file(Self.fileName)
        self.fileSystem = fileSystem
    }

    init(directory: String, fileSystem: any FileSystem) {
        self.init(directory: LogDirectory(directory), fileSystem: fileSystem)
    }

    struct Entry {
        var status: Int?
        var reason: String
        var seq: UInt64
        var record: ArraySlice<UInt8>
    }

    func append(_ entries: [Entry], nowMillis: Int64) throws {
        guard !entries.isEmpty else { return }
        var bytes: [UInt8] = []
        for entry in entries {
            bytes.append(contentsOf: #"{"status":"#.utf8)
            bytes.append(contentsOf: (entry.status.map(String.init) ?? "null").utf8)
            bytes.append(contentsOf: #","reason":"#.utf8)
            bytes.append(contentsOf: JSONBytes.quoted(entry.reason).utf8)
            bytes.append(contentsOf: #","seq":\#(entry.seq),"rejected_at":\#(nowMillis),"record":"#.utf8)
            bytes.append(contentsOf: entry.record)
            bytes.append(contentsOf: "}\n".utf8)
        }
        try fileSystem.appendDurably(location, bytes)
    }

    /// The seqs at or after `from` set aside in the last `tailBytes` of the file: those a process
    /// killed between setting a batch's events aside and acknowledging them left behind, so that
    /// the restart acknowledges them without writing them a second time. The file is appended in
    /// seq order and only the last batch's lines can be unacknowledged, so its tail is enough;
    /// a missing or unreadable file (or a line cut by the tail's start) contributes nothing.
    func seqs(from: UInt64, tailBytes: Int) -> Set<UInt64> {
        guard let file = try? fileSystem.open(location, .read) else { return [] }
        defer { fileSystem.close(file) }
        guard let size = try? fileSystem.size(file), size > 0 else { return [] }
        let start = size > UInt64(tailBytes) ? size - UInt64(tailBytes) : 0
        guard let bytes = try? fileSystem.readAll(file, from: start) else { return [] }
        var lines = bytes.split(separator: UInt8(ascii: "\n"))
        if start > 0, !lines.isEmpty { lines.removeFirst() }  // cut by the tail's start
        var seqs: Set<UInt64> = []
        for line in lines {
            if let seq = Self.seq(ofLine: line), seq >= from { seqs.insert(seq) }
        }
        return seqs
    }

    /// The `seq` of one line as ``append(_:nowMillis:)`` writes it: after `{"status":…,"reason":`
    /// and its JSON string (whose escapes are skipped, so a reason holding `"seq":` does not
    /// mislead), `,"seq":` and digits. Nil for any other line.
    static func seq(ofLine line: ArraySlice<UInt8>) -> UInt64? {
        let reasonKey = Array(#","reason":""#.utf8), seqKey = Array(#","seq":"#.utf8)
        guard line.starts(with: #"{"status":"#.utf8),
              let keyAt = line.firstRange(of: reasonKey) else { return nil }
        var i = keyAt.upperBound
        while i < line.endIndex, line[i] != UInt8(ascii: "\"") {
            i += line[i] == UInt8(ascii: "\\") ? 2 : 1
        }
        guard i < line.endIndex else { return nil }
        let rest = line[(i + 1)...]
        guard rest.starts(with: seqKey) else { return nil }
        let digits = rest.dropFirst(seqKey.count).prefix { (48...57).contains($0) }
        return digits.isEmpty ? nil : UInt64(String(decoding: digits, as: UTF8.self))
    }
}

/// `delivery.inflight` in the log directory: the ranges of the requests not yet acknowledged
/// durably, so that a restart neither sends again what a crashed process had delivered nor cuts
/// differently what it had in flight. One line per range, `<seq of the checkpoint when it was
/// sent> <number of records read> <times sent> <failed passes> [<boot id>]`; ranges that follow
/// each other with the same last three fields share a line, their record counts joined by commas
/// (`0 50,50,50 1 0 <boot id>`: three batches of 50 from seq 0). (The third field, for
/// `X-Beacon-Retry`, may be missing: 1; the fourth, the passes that ended with a retryable answer,
/// for isolation, may be missing: 0; the fifth, present once the collector accepted the range, is
/// the kernel's boot id): before the request in flight the batches (at most eight) accepted whose
/// acknowledgements are not durable yet, then the request in flight, then those an earlier run
/// sent that this one has not reached yet (a restart resumes at whichever starts at the checkpoint).
///
/// Rewritten in place with one `pwrite` into a fixed-size record (padded with spaces: written
/// whole once, then as far as this or the last version's lines reach) on a file kept open, through
/// the log's file-system seam; never fsynced. It matters after a process crash (kill -9), which keeps the page cache and cannot tear one small write: a restart acknowledges
/// the accepted ranges without sending them and re-sends only the request in flight, as it was
/// cut. The boot id makes it worthless after a power loss (or any reboot): what reached the disk of
/// it may be any earlier version, and the log may have lost records since written again with the
/// same seqs, so accepted ranges of another boot are sent again (at-least-once, from the durable
/// checkpoint, which the grouped `fdatasync` keeps at most ``Uploader/maxOutstandingBatches`` batches
/// behind: joined ranges let one of its eight entries cover many batches).
final class InflightFile: Sendable {
    static let fileName = "delivery.inflight"
    /// The most ranges the file holds: the acknowledgements outstanding, the request in flight
    /// and as many ranges of an earlier run not reached yet.
    static let capacity = 2 * Uploader.maxOutstandingAcknowledgements + 1
    /// The record's size, one page (a kill -9 cannot tear it): room for `capacity` lines of four
    /// 20-digit numbers and a boot id, and the joined counts of ``Uploader/maxOutstandingBatches``.
    static let recordSize = 4096
    /// The file, reached through the log directory's descriptor.
    let location: LogPath
    var path: String { location.path }
    let fileSystem: any FileSystem
    /// This boot's id: accepted ranges saved under another are not trusted.
    let bootID: String
    /// The open file, and how many bytes of its record hold lines (the rest are spaces already).
    private let file = Mutex<(open: LogFile?, used: Int)>((nil, InflightFile.recordSize))

    /// The file in `directory`, reached through its descriptor (a link there is refused).
    init(directory: LogDirectory, fileSystem: any FileSystem, bootID: String = InflightFile.currentBootID) {
        location = directory.file(Self.fileName)
        self.fileSystem = fileSystem
        self.bootID = bootID
    }

    convenience init(directory: String, fileSystem: any FileSystem, bootID: String = InflightFile.currentBootID) {
        self.init(directory: LogDirectory(directory), fileSystem: fileSystem, bootID: bootID)
    }

    /// `/proc/sys/kernel/random/boot_id` without its dashes (32 hex digits), new at every boot; a
    /// placeholder never equal to a real one when it cannot be read (accepted ranges are then
    /// always sent again).
    static let currentBootID: String = {
        let text = (try? String(contentsOfFile: "/proc/sys/kernel/random/boot_id", encoding: .utf8)) ?? ""
        let id = text.filter(\.isHexDigit)
        return id.count == 32 ? id.lowercased() : "unknown"
    }()

    deinit {
        file.withLock { state in state.open.map { fileSystem.close($0) } }
    }

    struct Range: Equatable {
        var firstSeq: UInt64
        var count: Int
        /// Times these records were sent as they are now cut, this send included.
        var sends: Int = 1
        /// Passes at these records that ended with a retryable answer (not sends whose answer
        /// was never seen).
        var failures: Int = 0
        /// The collector accepted these records in this boot: a restart acknowledges them
        /// without sending them again.
        var accepted = false

        /// The part of this range from `seq` on: all of it when it starts there or later, nil when
        /// it ends before. A part cut off keeps what the range says of its records (sent,
        /// accepted), but not its failures: those were of a request cut differently, and must not
        /// isolate or set aside the part sent again on its own (issue 26).
        func from(_ seq: UInt64) -> Range? {
            let end = firstSeq + UInt64(count)
            guard end > seq else { return nil }
            guard firstSeq < seq else { return self }
            return Range(firstSeq: seq, count: Int(end - seq), sends: sends, failures: 0, accepted: accepted)
        }
    }

    /// The largest record count, send count or failure count a range may hold: larger ones mean
    /// the file is damaged.
    static let maxCount = Int(Int32.max)

    /// The ranges saved, oldest first; empty when there is no file or it cannot be read, or holds a
    /// number out of range (the next batch is then cut afresh).
    func load() -> [Range] {
        guard let bytes = (try? fileSystem.contents(ofFile: location)) ?? nil else { return [] }
        var ranges: [Range] = []
        for line in String(decoding: bytes, as: UTF8.self).split(separator: "\n") {
            let parts = line.split(separator: " ")
            if parts.isEmpty { continue }
            guard (2...5).contains(parts.count), var first = UInt64(parts[0]) else { return [] }
            let counts = parts[1].split(separator: ",", omittingEmptySubsequences: false).map { Int($0) ?? 0 }
            guard counts.allSatisfy({ (1...Self.maxCount).contains($0) }) else { return [] }
            let sends = parts.count >= 3 ? Int(parts[2]) ?? 1 : 1
            let failures = parts.count >= 4 ? Int(parts[3]) ?? 0 : 0
            // Counts no run could have written (they trapped the delivery state machine's arithmetic).
            guard sends <= Self.maxCount, failures <= Self.maxCount else { return [] }
            let accepted = parts.count == 5 && parts[4] == bootID && bootID != "unknown"
            for (i, count) in counts.enumerated() {
                if i > 0 {
                    let (next, overflow) = first.addingReportingOverflow(UInt64(counts[i - 1]))
                    guard !overflow else { return [] }
                    first = next
                }
                ranges.append(Range(firstSeq: first, count: count, sends: max(1, sends), failures: max(0, failures), accepted: accepted))
            }
        }
        return ranges
    }

    /// How many lines `ranges` take in the file: ranges that follow each other (``sharesLine(_:_:)``)
    /// share one.
    static func lineCount(_ ranges: [Range]) -> Int {
        var count = 0
        for i in ranges.indices where i == 0 || !sharesLine(ranges[i - 1], ranges[i]) { count += 1 }
        return count
    }

    /// Whether `range` goes on the line of `last`, the range before it: it starts where `last`
    /// ends, with the same sends, failures and acceptance.
    static func sharesLine(_ last: Range, _ range: Range) -> Bool {
        last.sends == range.sends && last.failures == range.failures && last.accepted == range.accepted
            && last.firstSeq.addingReportingOverflow(UInt64(last.count)) == (range.firstSeq, false)
    }

    /// Replaces the file's ranges with `ranges` (at most `capacity` lines, ``lineCount(_:)``).
    func save(_ ranges: [Range]) throws {
        precondition(Self.lineCount(ranges) <= Self.capacity, "delivery.inflight holds at most \(Self.capacity) lines")
        // Written on every request: digits straight into the record, no strings, the lines
        // found while writing.
        var record = [UInt8](repeating: UInt8(ascii: " "), count: Self.recordSize)
        let used = record.withUnsafeMutableBufferPointer { buffer -> Int in
            var at = 0
            func put(_ value: UInt64, then separator: UInt8) {
                let digits = DecimalDigits.count(value)
                DecimalDigits.write(value, digits: digits, to: buffer.baseAddress! + at)
                buffer[at + digits] = separator
                at += digits + 1
            }
            var start = 0
            while start < ranges.count {
                var end = start + 1
                while end < ranges.count && Self.sharesLine(ranges[end - 1], ranges[end]) { end += 1 }
                let range = ranges[start]
                put(range.firstSeq, then: UInt8(ascii: " "))
                for i in start..<end { put(UInt64(ranges[i].count), then: UInt8(ascii: i == end - 1 ? " " : ",")) }
                put(UInt64(range.sends), then: UInt8(ascii: " "))
                put(UInt64(range.failures), then: UInt8(ascii: range.accepted ? " " : "\n"))
                if range.accepted {
                    for byte in bootID.utf8 { buffer[at] = byte; at += 1 }
                    buffer[at] = UInt8(ascii: "\n")
                    at += 1
                }
                start = end
            }
            return at
        }
        try file.withLock { state in
            if state.open == nil {
                let opened = try fileSystem.open(location, .createOrOpen)
                do {
                    // A file of an earlier version may be shorter or longer.
                    try fileSystem.truncate(opened, to: UInt64(Self.recordSize))
                } catch {
                    fileSystem.close(opened)
                    throw error
                }
                state = (opened, Self.recordSize)
            }
            // One pwrite from the start of the record, as far as this record or the last one
            // reached (beyond both the file holds spaces): usually a few hundred bytes, not a page.
            let length = max(used, state.used)
            do {
                try record.withUnsafeBytes { try fileSystem.write(state.open!, UnsafeRawBufferPointer(rebasing: $0[..<length]), at: 0) }
            } catch {
                fileSystem.close(state.open!)
                state = (nil, Self.recordSize)
                throw error
            }
            state.used = used
        }
    }
}
