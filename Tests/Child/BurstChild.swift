import BeaconLog
import Foundation
import Glibc

/// `beacon-test-child burst DIR`: whether a burst committed at once moves glibc's mmap threshold,
/// in a process where nothing else did. Prints `baseline mapped|heap` (a 256 KiB `malloc` block:
/// mapped while the threshold is at its default, 128 KiB), then opens the log in DIR (`.batched`),
/// appends 4,000 records of 600 bytes in one commit (its chunk buffer grows to about 2.5 MiB)
/// and one record in another (after which the grown buffer is freed), and prints
/// `after mapped|heap`: whether a 1 MiB `malloc` block is mapped (the threshold at most the
/// baseline block's size) or comes from the heap (a freed block of megabytes raised it). Then it
/// closes the log and exits 0. Errors go to stderr with exit status 2.
///
/// `beacon-test-child burst DIR read`: the same for the reader's read-ahead. Appends 3,000 records
/// of 600 bytes in commits of 100 (chunk buffers of the usual size), reads them all back in
/// batches of 50 as the uploader does (the read-ahead is refilled, and its old block freed, about
/// every 200 records), and prints `baseline` for a 136 KiB block and `after` for a 200 KiB one.
func runBurstChild(_ arguments: [String]) -> Never {
    guard arguments.count == 1 || (arguments.count == 2 && arguments[1] == "read") else {
        FileHandle.standardError.write(Data("usage: beacon-test-child burst DIR [read]\n".utf8))
        exit(64)
    }
    /// Whether a `malloc` block of `size` is mapped: glibc marks a mapped chunk with the
    /// `IS_MMAPPED` bit (2) of the size word just before the block.
    func mapped(_ size: Int) -> String {
        guard let block = malloc(size) else { return "none" }
        defer { free(block) }
        let sizeWord = UnsafeRawPointer(block).load(fromByteOffset: -MemoryLayout<UInt>.size, as: UInt.self)
        return sizeWord & 2 != 0 ? "mapped" : "heap"
    }
    let reading = arguments.count == 2
    // The check itself raises the threshold to its block's mapped size (a page more): the block
    // checked after must be larger.
    childPrint("baseline \(mapped(reading ? 136 * 1024 : 256 * 1024))")
    do {
        var config = BeaconLog.Configuration(directory: arguments[0])
        config.durability = .batched(records: 100, interval: .seconds(3600))
        let log = try BeaconLog(configuration: config)
        let pad = String(repeating: "p", count: 580)
        let records = (0..<4000).map { Array(#"{"n":\#($0),"p":"\#(pad)"}"#.utf8) }
        if reading {
            for start in stride(from: 0, to: 3000, by: 100) { try log.appendCommittingNow(contentsOf: Array(records[start..<start + 100])) }
            var read = 0
            var position: LogPosition?
            while read < 3000 {
                let batch = try log.read(from: position, maxRecords: 50)
                guard !batch.isEmpty else {
                    FileHandle.standardError.write(Data("beacon-test-child burst: read \(read) of 3000 records in \(arguments[0]), then nothing\n".utf8))
                    exit(2)
                }
                read += batch.count
                position = batch.end
            }
            childPrint("after \(mapped(200 * 1024))")
            try log.close()
            exit(0)
        }
        try log.appendCommittingNow(contentsOf: records)
        try log.appendCommittingNow(contentsOf: [Array(#"{"n":4000}"#.utf8)])
        childPrint("after \(mapped(1 << 20))")
        try log.close()
    } catch {
        FileHandle.standardError.write(Data("beacon-test-child burst: \(error)\n".utf8))
        exit(2)
    }
    exit(0)
}
