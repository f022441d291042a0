import Foundation
import Glibc
import Synchronization
import Testing
@testable import BeaconLog

/// The figures `beacon status`, `beacon send --metrics` and ``BeaconMetrics`` read from the
/// segments directly (the oldest pending record, for the lag; the newest segment's end, for the
/// backlog of a reader beside a writer) open those segments through the log's file system like
/// every other call (issue 28, after issue 32): a symbolic link in place of a segment is never
/// followed, and a FIFO never blocks them. On 0095f8f they opened the segment by its path with
/// plain `open(2)`: the link was followed (the copy behind it was read as the log's own
/// segment), and the FIFO blocked the caller until a writer came.
@Suite struct InspectionLinkSafetyTests {
    /// Which figure, and the segment it reads.
    enum Figure: String, CaseIterable, CustomTestStringConvertible {
        case oldestPending = "the oldest pending record (the checkpoint's segment)"
        case pendingOnDisk = "the backlog of a reader beside a writer (the newest segment)"
        var testDescription: String { rawValue }
    }

    enum Planted: String, CaseIterable, CustomTestStringConvertible {
        case link = "a symbolic link to a copy of the segment"
        case fifo = "a FIFO"
        var testDescription: String { rawValue }
    }

    @Test("a link or a FIFO in place of a segment: the inspection reads neither follow the link nor block on the FIFO", arguments: Figure.allCases, Planted.allCases)
    func segmentReplaced(_ figure: Figure, _ planted: Planted) throws {
        try withTemporaryDirectory { root in
            let dir = root + "/log"
            // 60 records over several segments, 10 acknowledged, by a writer that stays open;
            // the inspecting instance reads beside it (as `beacon send --follow` does).
            var writerConfig = smallConfig(dir, durability: .everyRecord)
            writerConfig.access = .write
            let writer = try BeaconLog(configuration: writerConfig)
            defer { try? writer.close() }
            for i in 0..<60 { try writer.append(numbered(i, pad: 100)) }
            var readerConfig = smallConfig(dir, durability: .everyRecord)
            readerConfig.access = .read
            let reader = try BeaconLog(configuration: readerConfig)
            defer { try? reader.close() }
            try reader.acknowledge(through: try reader.read(maxRecords: 10).end)
            let numbers = try segmentNumbers(dir)
            #expect(numbers.count >= 3)

            // What the figure is with the segment in place.
            let before = Self.figure(figure, of: reader)
            switch figure {
            case .oldestPending: #expect(before == "10")
            case .pendingOnDisk: #expect(before == "50")
            }

            let number = figure == .oldestPending ? reader.checkpoint.segment : numbers.last!
            let segment = dir + "/" + SegmentName.fileName(number)
            let copy = root + "/elsewhere-" + SegmentName.fileName(number)
            switch planted {
            case .link:
                // The copy holds the same records, but fewer of them for the newest segment, so a
                // figure read through the link differs from the log's own in both cases.
                var bytes = try fileBytes(segment)
                if figure == .pendingOnDisk, let firstLine = bytes.firstIndex(of: 0x0A) { bytes = Array(bytes[...firstLine]) }
                try writeFile(copy, bytes)
                #expect(unlink(segment) == 0)
                #expect(symlink(copy, segment) == 0)
            case .fifo:
                #expect(unlink(segment) == 0)
                #expect(mkfifo(segment, 0o600) == 0)
            }

            // Bounded: on the old code the FIFO blocks `open(2)`; the test then opens its write
            // end (a blocked reader lets that open succeed) and closes it, so the call returns.
            let after = Self.within(seconds: 30, unblockingFIFO: planted == .fifo ? segment : nil) { Self.figure(figure, of: reader) }
            #expect(after.returnedInTime, "the call blocked on the FIFO at \(segment) for 30 s")
            switch figure {
            case .oldestPending:
                // Not the copy's record 10: the segment is passed over like one the quota deleted.
                #expect(after.value != "10", "the link was followed: \(after.value ?? "nil")")
            case .pendingOnDisk:
                // The newest segment cannot be read safely: no figure (the caller keeps its own).
                #expect(after.value == nil, "the newest segment was read through the \(planted): \(after.value ?? "nil")")
            }
            if planted == .link { #expect(try fileBytes(copy).isEmpty == false) }
            var st = stat()
            #expect(lstat(segment, &st) == 0 && (st.st_mode & S_IFMT) == (planted == .link ? S_IFLNK : S_IFIFO), "left as it was for the operator")
        }
    }

    /// The figure as text: the oldest pending record's seq, or the backlog's record count; nil
    /// when there is none.
    static func figure(_ figure: Figure, of log: BeaconLog) -> String? {
        switch figure {
        case .oldestPending: log.oldestPendingRecord().map { "\($0.seq)" }
        case .pendingOnDisk: log.pendingOnDisk().map { "\($0.records)" }
        }
    }

    /// Runs `body` on a thread of its own and waits up to `seconds` for it; past that, opens the
    /// FIFO's write end (non-blocking) and closes it, which lets a reader blocked opening it go
    /// on, and waits for `body` again.
    static func within(seconds: Int, unblockingFIFO fifo: String?, _ body: @escaping @Sendable () -> String?) -> (returnedInTime: Bool, value: String?) {
        let result = Mutex<String??>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread {
            let value = body()
            result.withLock { $0 = .some(value) }
            done.signal()
        }.start()
        if done.wait(timeout: .now() + .seconds(seconds)) == .success {
            return (true, result.withLock { $0 ?? nil })
        }
        if let fifo {
            let fd = open(fifo, O_WRONLY | O_NONBLOCK | O_CLOEXEC)
            if fd >= 0 { close(fd) }
        }
        done.wait()
        return (false, result.withLock { $0 ?? nil })
    }
}
