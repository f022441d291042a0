import Beacon
import BeaconLog
import Foundation
import Glibc
import Synchronization

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
///
/// `beacon-test-child burst DIR upload URL BYTES FORMAT [gzip]`: the same for delivery: appends
/// 1.5 MB of records of BYTES bytes in commits of 100, then an uploader alone delivers them to the
/// collector at URL in FORMAT (a `PayloadFormat` raw value), gzipped with `gzip`, in catch-up
/// requests as large as the default `maxBatchBytes` (1 MiB) holds; prints `baseline` for a 128 KiB
/// block before (kept: the check moves nothing) and `after` for another one once the collector has
/// them all (mapped unless a freed block raised the threshold past 128 KiB, by however little).
func runBurstChild(_ arguments: [String]) -> Never {
    if arguments.count >= 5, arguments[1] == "upload" { runUploadBurstChild(arguments) }
    guard arguments.count == 1 || (arguments.count == 2 && arguments[1] == "read") else {
        FileHandle.standardError.write(Data("usage: beacon-test-child burst DIR [read | upload URL BYTES FORMAT [gzip]]\n".utf8))
        exit(64)
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

/// The addresses of the blocks ``mapped(_:keep:)`` kept: still reachable, no leak for LeakSanitizer.
private let keptBlocks = Mutex<[UInt]>([])

/// Whether a `malloc` block of `size` is mapped: glibc marks a mapped chunk with the `IS_MMAPPED`
/// bit (2) of the size word just before the block. `keep`: the block is never freed, so that
/// checking leaves the threshold as it was.
private func mapped(_ size: Int, keep: Bool = false) -> String {
    guard let block = malloc(size) else { return "none" }
    defer { if keep { let address = UInt(bitPattern: block); keptBlocks.withLock { $0.append(address) } } else { free(block) } }
    let sizeWord = UnsafeRawPointer(block).load(fromByteOffset: -MemoryLayout<UInt>.size, as: UInt.self)
    return sizeWord & 2 != 0 ? "mapped" : "heap"
}

/// `beacon-test-child burst DIR upload URL BYTES FORMAT [gzip]` (see ``runBurstChild(_:)``).
private func runUploadBurstChild(_ arguments: [String]) -> Never {
    guard (5...6).contains(arguments.count), let url = URL(string: arguments[2]), let bytes = Int(arguments[3]), bytes >= 20,
          let format = PayloadFormat(rawValue: arguments[4]), arguments.count == 5 || arguments[5] == "gzip" else {
        FileHandle.standardError.write(Data("usage: beacon-test-child burst DIR upload URL BYTES FORMAT [gzip]\n".utf8))
        exit(64)
    }
    func fail(_ message: String) -> Never {
        FileHandle.standardError.write(Data("beacon-test-child burst upload: \(message)\n".utf8))
        exit(2)
    }
    // Blocks of 128 KiB, glibc's default threshold: the first one kept, so that the check moves
    // nothing, and the second one comes from the heap after any mapped block was freed.
    childPrint("baseline \(mapped(128 * 1024, keep: true))")
    let count = 1_500_000 / bytes
    do {
        var config = BeaconLog.Configuration(directory: arguments[0])
        config.durability = .batched(records: 100, interval: .seconds(3600))
        let log = try BeaconLog(configuration: config)
        let pad = String(repeating: "p", count: bytes - 20)   // records of BYTES bytes, give or take a few
        let records = (0..<count).map { Array(#"{"n":\#($0),"p":"\#(pad)"}"#.utf8) }
        for start in stride(from: 0, to: count, by: 100) { try log.appendCommittingNow(contentsOf: Array(records[start..<min(start + 100, count)])) }
        var delivery = DeliveryConfiguration(url: url)
        delivery.format = format
        delivery.gzip = arguments.count == 6
        delivery.flushInterval = nil
        delivery.requestTimeout = .seconds(60)
        let uploader = try Uploader(log: log, configuration: delivery, diagnostics: { _ in })
        let done = DispatchSemaphore(value: 0)
        Task {
            var attempts = 0
            while log.stats.pendingRecords > 0 && attempts < 100 {
                let result = await uploader.flush()
                if !result.outcome.isComplete { try? await Task.sleep(for: .milliseconds(50)) }
                attempts += 1
            }
            done.signal()
        }
        done.wait()
        guard log.stats.pendingRecords == 0 else { fail("\(log.stats.pendingRecords) of \(count) records in \(arguments[0]) still pending after 100 flushes to \(url)") }
        childPrint("after \(mapped(128 * 1024))")
        try log.close()
    } catch {
        fail("\(error)")
    }
    exit(0)
}
