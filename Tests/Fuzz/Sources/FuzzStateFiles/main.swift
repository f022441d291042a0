// The small files beside the segments, with any bytes in them: the checkpoint's two slots,
// `delivery.inflight`, `identity.json`, `writer.counters` and `reader.counters`. Promises:
// - checkpoint: the log opens; its checkpoint is never past the end of the log and lands on a
//   record (or a segment's start); reading from it gives the records after it in order, up to the
//   last one written; a slot that names a real record boundary is used as is; acknowledging and
//   appending go on from there;
// - delivery.inflight: the ranges loaded (or none: the documented fallback) drive a delivery
//   state machine through sends and failures without a trap;
// - identity.json: an identity, or the documented `invalid` error (a new id is made); a loaded
//   identity survives a save and a load;
// - counters: the log opens and counts a corrupt record on top of what was loaded (or of zeros:
//   the documented fallback for a damaged file), and saves them.
//
// Input: byte 0 picks the file (mod 6): 0 the checkpoint as is, 1 the checkpoint with each slot's
// CRC recomputed (the input is then the two slots' text up to `,"crc":`, split at the first
// 0xFF), 2 delivery.inflight, 3 identity.json, 4 writer.counters, 5 reader.counters.
@testable import Beacon
@testable import BeaconLog
import Foundation
import FuzzSupport

let root = (ProcessInfo.processInfo.environment["TMPDIR"] ?? "/tmp") + "/beacon-fuzz-state-\(getpid())"
try? FileManager.default.removeItem(atPath: root)
try! FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
atexit { try? FileManager.default.removeItem(atPath: root) }
nonisolated(unsafe) var iteration = 0

/// Segments 0 (seqs 0–4) and 1 (seqs 5–9): every record's start position.
func writeSegments(_ dir: String, corrupt: Bool = false) -> [LogPosition] {
    var starts: [LogPosition] = []
    for segment in 0..<2 {
        var bytes: [UInt8] = []
        for seq in UInt64(segment * 5)..<UInt64(segment * 5 + 5) {
            starts.append(LogPosition(segment: UInt64(segment), offset: UInt64(bytes.count), seq: seq))
            var frame = Frame.encode(seq: seq, record: Array(#"{"n":\#(seq)}"#.utf8))
            if corrupt && seq == 2 { frame[frame.count - 3] ^= 1 }
            bytes += frame
        }
        _ = FileManager.default.createFile(atPath: dir + "/" + SegmentName.fileName(UInt64(segment)), contents: Data(bytes))
    }
    return starts
}

func openLog(_ dir: String) -> BeaconLog {
    var configuration = BeaconLog.Configuration(directory: dir)
    configuration.durability = .none
    do {
        return try BeaconLog(configuration: configuration)
    } catch {
        promise(false, "the log does not open: \(error)")
        fatalError()
    }
}

func checkpointCase(_ dir: String, file: [UInt8]) {
    let starts = writeSegments(dir)
    _ = FileManager.default.createFile(atPath: dir + "/" + Checkpoint.fileName, contents: Data(file))
    let end = LogPosition(segment: 1, offset: 0, seq: 10)
    let log = openLog(dir)
    let checkpoint = log.checkpoint
    let boundaries = starts + [LogPosition(segment: 1, offset: UInt64(try! Data(contentsOf: URL(fileURLWithPath: dir + "/" + SegmentName.fileName(1))).count), seq: 10)]
    promise(checkpoint.seq <= end.seq, "checkpoint \(checkpoint) past the end of the log (seq 10)")
    promise(boundaries.contains(checkpoint) || (checkpoint.offset == 0 && checkpoint.segment <= 1), "checkpoint \(checkpoint) is not on a record")
    if let best = Checkpoint.decode(file: file).checkpoint, boundaries.contains(best.position) {
        // The newest valid slot, or an older valid one if the newest is unusable.
        let valid = Checkpoint.slots(file: file).compactMap(\.checkpoint).filter { boundaries.contains($0.position) }.map(\.position)
        promise(valid.contains(checkpoint), "a slot names the record boundary \(best.position), yet the checkpoint is \(checkpoint)")
    }
    do {
        var seqs: [UInt64] = []
        var position = checkpoint
        for _ in 0..<100 {
            let batch = try log.read(from: position, maxRecords: 3)
            if batch.isEmpty { break }
            seqs += batch.seqs
            position = batch.end
        }
        let first = seqs.first ?? 10
        promise(seqs == Array(first..<10), "read \(seqs) from checkpoint \(checkpoint)")
        promise(seqs.isEmpty || first <= max(checkpoint.seq, 0) || checkpoint.offset == 0, "read from seq \(first), past the checkpoint's \(checkpoint.seq)")
        try log.acknowledge(through: position)
        let appended = try log.append("{}")
        promise(appended == 10, "append after the checkpoint got seq \(appended)")
        try log.close()
    } catch {
        promise(false, "the log failed over a damaged checkpoint: \(error)")
    }
}

/// The two slots, each with a correct CRC over the text given for it.
func signedSlots(_ data: [UInt8]) -> [UInt8] {
    let split = data.firstIndex(of: 0xFF) ?? data.count
    return [Array(data[..<split]), Array(data[min(split + 1, data.count)...])].flatMap { body -> [UInt8] in
        var slot = body + Array(#","crc":\#(CRC32C.checksum(body))}"#.utf8) + [0x0A]
        slot = Array(slot.prefix(Checkpoint.slotSize))
        return slot + [UInt8](repeating: 0, count: Checkpoint.slotSize - slot.count)
    }
}

func inflightCase(_ dir: String, file: [UInt8]) {
    _ = FileManager.default.createFile(atPath: dir + "/" + InflightFile.fileName, contents: Data(file))
    let ranges = InflightFile(directory: dir, fileSystem: SystemFileSystem()).load()
    for range in ranges {
        promise(range.count > 0 && range.sends >= 1 && range.failures >= 0, "loaded an impossible range \(range)")
        // What the uploader does with a range an earlier run left: the same events again.
        var machine = DeliveryStateMachine(count: min(range.count, 64), earlierSends: range.sends, earlierFailures: range.failures, isolateAfter: 3)
        for step in 0..<40 {
            _ = machine.failureBudget
            _ = machine.resumePoint
            switch machine.nextAction() {
            case .send:
                machine.received(step % 3 == 2 ? .acknowledge : .retry, .init(status: step % 3 == 2 ? 200 : 503))
            case .commit, .stop:
                continue
            case .finished:
                break
            }
        }
    }
}

func identityCase(_ dir: String, file: [UInt8]) {
    _ = FileManager.default.createFile(atPath: dir + "/identity.json", contents: Data(file))
    let store = IdentityStore(directory: dir, fileSystem: SystemFileSystem())
    do {
        guard let identity = try store.load() else { return promise(false, "an identity file that exists loaded as none") }
        promise(!identity.anonymousId.isEmpty, "an empty anonymous id was loaded")
        try store.save(identity)
        let again = try store.load()
        promise(again == identity, "the identity changed through save and load: \(identity) → \(String(describing: again))")
    } catch let error as IdentityError {
        promise(error.invalid, "an identity file that exists could not be read: \(error)")
    } catch {
        promise(false, "identity.json: \(error)")
    }
}

func countersCase(_ dir: String, file: [UInt8], kind: BeaconLog.LockKind) {
    _ = writeSegments(dir, corrupt: true)
    _ = FileManager.default.createFile(atPath: PersistedCounters.path(kind, directory: dir), contents: Data(file))
    let loaded = PersistedCounters.load(directory: dir, fileSystem: SystemFileSystem())
    let log = openLog(dir)
    do {
        var position = log.checkpoint
        var skipped = 0
        for _ in 0..<100 {
            let batch = try log.read(from: position)
            skipped += batch.skippedCorrupt
            if batch.isEmpty { break }
            position = batch.end
        }
        promise(skipped == 1, "one corrupt record, \(skipped) skipped")
        let stats = log.stats
        promise(stats.skippedCorrupt >= loaded.skippedCorrupt, "skipped_corrupt went down from \(loaded.skippedCorrupt) to \(stats.skippedCorrupt)")
        try log.acknowledge(through: position)
        try log.close()
        _ = PersistedCounters.load(directory: dir, fileSystem: SystemFileSystem())
    } catch {
        promise(false, "the log failed over damaged counters: \(error)")
    }
}

FuzzMain.run { bytes in
    var input = FuzzInput(bytes)
    let kind = input.byte() % 6
    let data = input.rest()
    iteration += 1
    let dir = root + "/\(iteration)"
    try! FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: false)
    defer { try? FileManager.default.removeItem(atPath: dir) }
    switch kind {
    case 0: checkpointCase(dir, file: data)
    case 1: checkpointCase(dir, file: signedSlots(data))
    case 2: inflightCase(dir, file: data)
    case 3: identityCase(dir, file: data)
    case 4: countersCase(dir, file: data, kind: .writer)
    default: countersCase(dir, file: data, kind: .reader)
    }
}
