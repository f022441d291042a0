import Foundation
import Glibc
import Synchronization
import Testing
@testable import BeaconLog
import FaultInjection
@_exported import BeaconTestSupport

// Helpers shared by the BeaconLog suites: raw segment contents, whole-log reads, and the
// `beacon-test-child` process for lock and kill -9 tests. Temporary directories, polling, the
// seeded generator and the child's path come from BeaconTestSupport.

/// A small-segment configuration most suites start from.
func smallConfig(_ dir: String, durability: BeaconLog.Durability = .none, segmentBytes: Int = 4096, maxBytes: Int64 = 1 << 20) -> BeaconLog.Configuration {
    var c = BeaconLog.Configuration(directory: dir)
    c.durability = durability
    c.segmentBytes = segmentBytes
    c.maxBytes = maxBytes
    return c
}

/// Configurations for a `.write` instance appending with `.everyRecord` and a `.read` instance
/// on the same directory: a service and its sidecar.
func sidecarConfigs(_ dir: String) -> (writer: BeaconLog.Configuration, reader: BeaconLog.Configuration) {
    var writer = smallConfig(dir, durability: .everyRecord)
    writer.access = .write
    var reader = smallConfig(dir)
    reader.access = .read
    return (writer, reader)
}

/// The numbers of the segment files in `dir`, ascending.
func segmentNumbers(_ dir: String) throws -> [UInt64] {
    try FileManager.default.contentsOfDirectory(atPath: dir).compactMap(SegmentName.parse).sorted()
}

/// The names of the segment files in `dir`, sorted.
func segmentFiles(_ dir: String) throws -> [String] {
    try FileManager.default.contentsOfDirectory(atPath: dir).filter { $0.hasSuffix(".jsonl") }.sorted()
}

func segmentPath(_ dir: String, _ number: UInt64) -> String {
    dir + "/" + SegmentName.fileName(number)
}

func fileBytes(_ path: String) throws -> [UInt8] {
    Array(try Data(contentsOf: URL(fileURLWithPath: path)))
}

func writeFile(_ path: String, _ bytes: [UInt8]) throws {
    try Data(bytes).write(to: URL(fileURLWithPath: path))
}

func fileSize(_ path: String) throws -> UInt64 {
    (try FileManager.default.attributesOfItem(atPath: path)[.size] as? NSNumber)?.uint64Value ?? 0
}

/// One line of a segment as found on disk.
struct RawLine {
    /// Byte range of the line in the file, newline included.
    var range: Range<Int>
    /// The parsed frame: its seq and event bytes, or nil if the line is not a valid record.
    var seq: UInt64?
    var event: [UInt8]?
}

/// The complete lines of a segment file (a trailing incomplete line is not included), each parsed.
func rawLines(_ path: String) throws -> [RawLine] {
    rawLines(of: try fileBytes(path))
}

/// The complete lines of a segment's bytes, each parsed.
func rawLines(of bytes: [UInt8]) -> [RawLine] {
    var lines: [RawLine] = []
    bytes.withUnsafeBytes { raw in
        Recovery.forEachLine(raw) { range, parsed in
            var line = RawLine(range: range.lowerBound..<(range.upperBound + 1))
            if case .record(let seq, let event) = parsed {
                line.seq = seq
                line.event = Array(bytes[event])
            }
            lines.append(line)
        }
    }
    return lines
}

/// Every record from the checkpoint to the end, in batches of `batchSize`, without acknowledging.
func readAll(_ log: BeaconLog, batchSize: Int = 1000) throws -> (seqs: [UInt64], records: [String], skipped: Int) {
    var seqs: [UInt64] = []
    var records: [String] = []
    var skipped = 0
    var cursor: LogPosition?
    for _ in 0..<100_000 {
        let batch = try log.read(from: cursor, maxRecords: batchSize)
        skipped += batch.skippedCorrupt
        if batch.isEmpty { break }
        cursor = batch.end
        seqs += batch.seqs
        records += batch.records.map { String(decoding: $0, as: UTF8.self) }
    }
    return (seqs, records, skipped)
}

/// The record `{"n":i}` padded to vary sizes.
func numbered(_ i: Int, pad: Int = 0) -> String {
    pad == 0 ? #"{"n":\#(i)}"# : #"{"n":\#(i),"p":"\#(String(repeating: "x", count: pad))"}"#
}

/// Creates a log with `config`, appends `numbered(0..<count, pad:)` and closes it.
func fillLog(_ config: BeaconLog.Configuration, count: Int, pad: Int = 0) throws {
    let log = try BeaconLog(configuration: config)
    for i in 0..<count { try log.append(numbered(i, pad: pad)) }
    try log.close()
}

/// The exact frame length of `record` at `seq`.
func frameLength(seq: UInt64, record: [UInt8]) -> Int {
    Frame.length(seq: seq, crc: CRC32C.checksum(record), count: record.count)
}

/// True when the log directory verifies clean; records the problems otherwise.
func expectClean(_ dir: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
    let report = try BeaconLog.verify(directory: dir)
    #expect(report.isClean, "verify found: \(report.problems.map(\.description))", sourceLocation: sourceLocation)
}

/// Runs `body` with the log's error if it throws a `BeaconLogError`, failing the test otherwise.
func expectLogError(_ code: BeaconLogError.Code, sourceLocation: SourceLocation = #_sourceLocation, _ body: () throws -> Void) -> BeaconLogError? {
    do {
        try body()
        Issue.record("expected BeaconLogError \(code), nothing was thrown", sourceLocation: sourceLocation)
        return nil
    } catch let error as BeaconLogError {
        #expect(error.code == code, "\(error)", sourceLocation: sourceLocation)
        return error
    } catch {
        Issue.record("expected BeaconLogError \(code), got \(error)", sourceLocation: sourceLocation)
        return nil
    }
}

// MARK: - The child process

/// A running `beacon-test-child`, its stdout collected line by line.
final class ChildProcess: Sendable {
    let process: SpawnedProcess
    let pid: Int32
    private let output = Mutex<(lines: [String], partial: [UInt8], eof: Bool)>(([], [], false))

    /// Starts `beacon-test-child ARGS...`, in `currentDirectory` if given (for relative paths).
    init(_ arguments: [String], currentDirectory: String? = nil) throws {
        let process = try SpawnedProcess(try childExecutablePath(), arguments, currentDirectory: currentDirectory, stdout: .pipe)
        self.process = process
        self.pid = process.pid
        Thread.detachNewThread { [self] in
            var chunk = [UInt8](repeating: 0, count: 4096)
            while true {
                let n = read(process.output, &chunk, chunk.count)
                if n < 0 && errno == EINTR { continue }
                let data = n > 0 ? Array(chunk[..<n]) : []
                output.withLock { o in
                    if data.isEmpty {
                        o.eof = true
                        return
                    }
                    o.partial += data
                    while let nl = o.partial.firstIndex(of: 0x0A) {
                        o.lines.append(String(decoding: o.partial[..<nl], as: UTF8.self))
                        o.partial.removeSubrange(...nl)
                    }
                }
                if data.isEmpty { return }
            }
        }
    }

    /// The lines printed so far.
    var lines: [String] { output.withLock { $0.lines } }

    /// Waits (polling every millisecond, at most `timeout` seconds) for a line satisfying `predicate`.
    @discardableResult
    func waitForLine(timeout: Double = 60, where predicate: (String) -> Bool) throws -> String {
        let deadline = ContinuousClock.now + .milliseconds(Int64(timeout * 1000))
        while ContinuousClock.now < deadline {
            let (lines, eof) = output.withLock { ($0.lines, $0.eof) }
            if let line = lines.first(where: predicate) { return line }
            if eof { throw ChildError("child \(pid) ended without the expected line; it printed \(lines.suffix(5))") }
            usleep(1000)
        }
        throw ChildError("child \(pid) did not print the expected line within \(timeout) s; it printed \(lines.suffix(5))")
    }

    /// SIGKILL (unless it already ended), then reaps the process. Safe to call more than once.
    func kill9() {
        process.signal(SIGKILL)
        process.wait()
    }

    /// Waits for the child to exit on its own and returns its status (128 + the signal if one
    /// killed it).
    func waitForExit() -> Int32 {
        switch process.wait() {
        case .exited(let status): status
        case .signalled(let signal): 128 + signal
        }
    }
}

// MARK: - Fault injection

/// A configuration using `fs`.
func faultyConfig(_ dir: String, _ fs: FaultyFileSystem, durability: BeaconLog.Durability = .everyRecord, segmentBytes: Int = 4096, maxBytes: Int64 = 1 << 20) -> BeaconLog.Configuration {
    var c = smallConfig(dir, durability: durability, segmentBytes: segmentBytes, maxBytes: maxBytes)
    c.fileSystem = fs
    return c
}

/// A configuration whose fsyncs succeed without reaching the disk: for tests of logic other than
/// durability (quota, rolls, sweeps), which then run without waiting on the disk.
func fastConfig(_ dir: String, durability: BeaconLog.Durability = .everyRecord, segmentBytes: Int = 4096, maxBytes: Int64 = 1 << 20) -> BeaconLog.Configuration {
    let fs = FaultyFileSystem()
    fs.skipSyncs = true
    return faultyConfig(dir, fs, durability: durability, segmentBytes: segmentBytes, maxBytes: maxBytes)
}
