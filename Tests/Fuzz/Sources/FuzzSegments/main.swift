// Segment files with any bytes in them (a damaged disk, another program, an attacker with write
// access to the directory), as the newest segment or an older one, then open, read, acknowledge
// and append. Promises:
// - no crash, no hang (libFuzzer's -timeout);
// - every record read is a line of the files that passes its CRC (the exact frame is on disk),
//   and seqs only go up;
// - a record planted intact after the garbage (on a line of its own) is read, unless the garbage
//   itself holds valid records with higher seqs (the planted one is then a copy to pass over);
// - the good records of the other segment are all read;
// - after acknowledging everything, an append gets a seq above every record read, is read back,
//   and once it is acknowledged too, `verify` finds the log clean.
//
// Input: byte 0 picks the layout (bit 0: garbage in the older segment instead of the newest;
// bit 1: no planted record; bits 2–4: good records in the other segment, 0–7; bits 5–7: the gap
// before the planted seq), the rest is the garbage.
@testable import BeaconLog
import Foundation
import FuzzSupport

let root = (ProcessInfo.processInfo.environment["TMPDIR"] ?? "/tmp") + "/beacon-fuzz-segments-\(getpid())"
try? FileManager.default.removeItem(atPath: root)
try! FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
atexit { try? FileManager.default.removeItem(atPath: root) }
nonisolated(unsafe) var iteration = 0

func frame(_ seq: UInt64, _ text: String) -> [UInt8] { Frame.encode(seq: seq, record: Array(text.utf8)) }

/// The valid frames (with their newline) in `bytes`, by seq.
func validFrames(_ bytes: [UInt8]) -> [(UInt64, [UInt8])] {
    var found: [(UInt64, [UInt8])] = []
    bytes.withUnsafeBytes { raw in
        Recovery.forEachLine(raw) { range, parsed in
            if case .record(let seq, _) = parsed { found.append((seq, Array(bytes[range]) + [0x0A])) }
        }
    }
    return found
}

FuzzMain.run { bytes in
    var input = FuzzInput(bytes)
    let layout = input.byte()
    let garbageIsOlder = layout & 1 != 0
    let planted = layout & 2 == 0
    let good = UInt64(layout >> 2 & 7)
    let gap = UInt64(layout >> 5)
    var garbage = input.rest()

    iteration += 1
    let dir = root + "/\(iteration)"
    try! FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: false)
    defer { try? FileManager.default.removeItem(atPath: dir) }

    // Older segment 0, newest segment 1; the good records continue from the planted one.
    let plantedSeq: UInt64 = garbageIsOlder ? gap : good + gap
    let plantedFrame = frame(plantedSeq, #"{"planted":true}"#)
    if planted { garbage += [0x0A] + plantedFrame }
    let goodSeqs: Range<UInt64> = garbageIsOlder ? (plantedSeq + 1)..<(plantedSeq + 1 + good) : 0..<good
    let goodBytes = goodSeqs.flatMap { frame($0, #"{"event":"good","n":\#($0)}"#) }
    let files = garbageIsOlder ? [garbage, goodBytes] : [goodBytes, garbage]
    for (number, content) in files.enumerated() {
        _ = FileManager.default.createFile(atPath: dir + "/" + SegmentName.fileName(UInt64(number)), contents: Data(content))
    }
    let onDisk = Set(files.flatMap(validFrames).map(\.1))
    let garbageSeqs = validFrames(garbage).map(\.0)

    var configuration = BeaconLog.Configuration(directory: dir)
    configuration.durability = .none
    let log: BeaconLog
    do {
        log = try BeaconLog(configuration: configuration)
    } catch {
        promise(false, "the log does not open over a damaged segment: \(error)")
        return
    }
    var seqs: [UInt64] = []
    var position = log.checkpoint
    do {
        for _ in 0..<10_000 {
            let batch = try log.read(from: position, maxRecords: 7, maxBytes: 4096)
            if batch.isEmpty { break }
            for (seq, record) in zip(batch.seqs, batch.records) {
                promise(onDisk.contains(Frame.encode(seq: seq, record: Array(record))), "read seq \(seq) whose frame is not a valid line of the files")
                promise(seqs.last.map { seq > $0 } ?? true, "seq \(seq) read after \(seqs.last!)")
                seqs.append(seq)
            }
            promise(batch.end > position, "a batch did not move on (\(position))")
            position = batch.end
            try log.acknowledge(through: position)
        }
        let left = try log.read(from: position)
        promise(left.isEmpty, "records left after 10 000 batches")
        let read = Set(seqs)
        if planted && !garbageSeqs.contains(where: { $0 >= plantedSeq }) {
            promise(read.contains(plantedSeq), "the record planted after the garbage (seq \(plantedSeq)) was not read; read \(seqs)")
        }
        // A good record is passed over only as a copy: when the older garbage holds a seq at or above it.
        for seq in goodSeqs where !garbageIsOlder || !garbageSeqs.contains(where: { $0 >= seq }) {
            promise(read.contains(seq), "good record \(seq) in the undamaged segment was not read; read \(seqs)")
        }
        let appended = try log.append(#"{"after":"recovery"}"#)
        promise(seqs.allSatisfy { appended > $0 }, "append got seq \(appended), not above the records read (\(seqs.max()!))")
        try log.sync()
        let batch = try log.read()
        promise(batch.seqs == [appended], "the appended record is not the only one left to read: \(batch.seqs)")
        try log.acknowledge(through: batch.end)
        try log.close()
        let report = try BeaconLog.verify(directory: dir)
        promise(report.isClean, "verify after reading and acknowledging everything: \(report.problems)")
    } catch {
        promise(false, "a damaged segment made the log fail: \(error)")
    }
}
