import BeaconLog
import Foundation
import Glibc

/// `beacon-test-child log DIR every|batched|none COUNT [SEGMENT_BYTES] [readWrite|write]`:
/// opens the log in DIR and appends COUNT records `{"n":i}`, where i starts at the log's next
/// sequence number (so i == seq), printing:
/// - `ready` once the log is open;
/// - `durable i` when record i is known durable: after each append under `every`
///   (`.everyRecord`), after each `sync()` (every 50 records) under `batched` and `none`;
/// - `done` after the last record is synced, then closes the log and exits 0.
/// Errors go to stderr with exit status 2. Tests kill it with SIGKILL at random moments.
func runLogChild(_ arguments: [String]) -> Never {
    let usage = "usage: beacon-test-child log DIR every|batched|none COUNT [SEGMENT_BYTES] [readWrite|write]\n"
    guard arguments.count >= 3, let count = Int(arguments[2]) else {
        FileHandle.standardError.write(Data(usage.utf8))
        exit(64)
    }
    var config = BeaconLog.Configuration(directory: arguments[0])
    switch arguments[1] {
    case "every": config.durability = .everyRecord
    case "batched": config.durability = .batched(records: 20, interval: .milliseconds(2))
    case "none": config.durability = .none
    default:
        FileHandle.standardError.write(Data(usage.utf8))
        exit(64)
    }
    if arguments.count >= 4 {
        guard let bytes = Int(arguments[3]) else {
            FileHandle.standardError.write(Data(usage.utf8))
            exit(64)
        }
        config.segmentBytes = bytes
        config.maxBytes = max(config.maxBytes, Int64(bytes) * 2)
    }
    if arguments.count >= 5 {
        switch arguments[4] {
        case "readWrite": config.access = .readWrite
        case "write": config.access = .write
        default:
            FileHandle.standardError.write(Data(usage.utf8))
            exit(64)
        }
    }
    do {
        let log = try BeaconLog(configuration: config)
        let start = log.stats.nextSeq
        childPrint("ready")
        let everyRecord = config.durability == .everyRecord
        for i in start..<(start + UInt64(count)) {
            let seq = try log.append(#"{"n":\#(i)}"#)
            guard seq == i else {
                FileHandle.standardError.write(Data("beacon-test-child log: record \(i) got seq \(seq)\n".utf8))
                exit(2)
            }
            if everyRecord {
                childPrint("durable \(i)")
            } else if (i - start) % 50 == 49 {
                try log.sync()
                childPrint("durable \(i)")
            }
        }
        try log.sync()
        childPrint("done")
        try log.close()
        exit(0)
    } catch {
        FileHandle.standardError.write(Data("beacon-test-child log: \(error)\n".utf8))
        exit(2)
    }
}
