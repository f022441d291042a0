import Foundation
import Glibc
import Testing
import BeaconTestTraits
@testable import BeaconLog

/// `writer.lock` / `reader.lock` across two processes (the `beacon-test-child` holds one), and the
/// writer/reader split: one process appends while another reads and acknowledges.
@Suite(.blocking) struct LockTests {
    /// While a child holds the writer lock: opening to write fails with `.locked` naming its pid,
    /// opening to read works; after SIGKILL the lock is free.
    @Test func writerLockHeldByAnotherProcess() throws {
        try withTemporaryDirectory { dir in
            let child = try ChildProcess(["lock", dir, "writer"])
            defer { child.kill9() }
            let line = try child.waitForLine { $0.hasPrefix("locked ") }
            #expect(line == "locked \(child.pid)")
            #expect(BeaconLog.lockHolder(.writer, directory: dir) == child.pid)
            #expect(BeaconLog.lockHolder(.reader, directory: dir) == nil)
            for access in [BeaconLog.Access.readWrite, .write] {
                var config = smallConfig(dir)
                config.access = access
                let error = expectLogError(.locked) { _ = try BeaconLog(configuration: config) }
                #expect(error?.lockHolderPID == child.pid)
                #expect(error?.message.contains("\(child.pid)") == true, "\(error?.message ?? "")")
                #expect(error?.path == dir + "/writer.lock")
            }
            var reader = smallConfig(dir)
            reader.access = .read
            let log = try BeaconLog(configuration: reader)
            #expect(try log.read().isEmpty)
            try log.close()
            child.kill9()
            #expect(BeaconLog.lockHolder(.writer, directory: dir) == nil)
            let writer = try BeaconLog(configuration: smallConfig(dir))
            try writer.append("{}")
            try writer.close()
        }
    }

    /// While a child holds the reader lock: reading fails with `.locked` naming its pid, appending works.
    @Test func readerLockHeldByAnotherProcess() throws {
        try withTemporaryDirectory { dir in
            let child = try ChildProcess(["lock", dir, "reader"])
            defer { child.kill9() }
            try child.waitForLine { $0.hasPrefix("locked ") }
            #expect(BeaconLog.lockHolder(.reader, directory: dir) == child.pid)
            for access in [BeaconLog.Access.readWrite, .read] {
                var config = smallConfig(dir)
                config.access = access
                let error = expectLogError(.locked) { _ = try BeaconLog(configuration: config) }
                #expect(error?.lockHolderPID == child.pid)
                #expect(error?.path == dir + "/reader.lock")
            }
            // The failed opens released the writer lock they took first.
            #expect(BeaconLog.lockHolder(.writer, directory: dir) == nil)
            var writer = smallConfig(dir)
            writer.access = .write
            let log = try BeaconLog(configuration: writer)
            #expect(try log.append("{}") == 0)
            _ = expectLogError(.invalidArgument) { try log.acknowledge(through: LogPosition(segment: 0, offset: 0, seq: 1)) }
            try log.close()
            child.kill9()
            #expect(BeaconLog.lockHolder(.reader, directory: dir) == nil)
            let both = try BeaconLog(configuration: smallConfig(dir))
            #expect(try both.read().seqs == [0])
            try both.close()
        }
    }

    /// Two instances in one process exclude each other the same way (separate open file descriptions).
    @Test func secondWriterInTheSameProcessIsRefused() throws {
        try withTemporaryDirectory { dir in
            let first = try BeaconLog(configuration: smallConfig(dir))
            let error = expectLogError(.locked) { _ = try BeaconLog(configuration: smallConfig(dir)) }
            #expect(error?.lockHolderPID == getpid())
            try first.close()
            let second = try BeaconLog(configuration: smallConfig(dir))
            try second.close()
        }
    }

    /// A copy of a lock file's descriptor, as a child that another thread is spawning holds until
    /// its `exec`: closing the log still releases both locks, so the directory reopens at once.
    /// Before, `close` alone left the lock on the open file description the copy kept alive, and
    /// the next open (after its 200 ms of retries) failed with `.locked`, naming this process:
    /// seen in full runs at load 20, where reopening tests ran beside tests spawning children.
    @Test func aCopiedLockDescriptorDoesNotKeepTheLock() throws {
        try withTemporaryDirectory { dir in
            let log = try BeaconLog(configuration: smallConfig(dir))
            // Every descriptor of this process open on one of the directory's lock files, copied.
            let fds = (try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")).compactMap { Int32($0) }
            let lockFiles = [dir + "/writer.lock", dir + "/reader.lock"]
            let copies = fds.filter { fd in
                (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(fd)")).map(lockFiles.contains) == true
            }.map { dup($0) }
            defer { copies.forEach { close($0) } }
            #expect(copies.count == 2, "the writer and reader lock files are open once each")
            try log.close()
            #expect(BeaconLog.lockHolder(.writer, directory: dir) == nil)
            #expect(BeaconLog.lockHolder(.reader, directory: dir) == nil)
            let reopened = try BeaconLog(configuration: smallConfig(dir))
            try reopened.close()
        }
    }

    /// A child appends with `.write` access (every policy) while this process reads and
    /// acknowledges with `.read`: every record arrives once, in order, and acknowledged
    /// segments are deleted under the writer.
    @Test(arguments: ["every", "batched", "none"])
    func childWritesWhileThisProcessReadsAndAcknowledges(policy: String) throws {
        let count = 800
        try withTemporaryDirectory { dir in
            let child = try ChildProcess(["log", dir, policy, String(count), "4096", "write"])
            defer { child.kill9() }
            try child.waitForLine { $0 == "ready" }
            var config = smallConfig(dir)
            config.access = .read
            let log = try BeaconLog(configuration: config)
            var received: [UInt64] = []
            var contents: [String] = []
            let deadline = ContinuousClock.now + .seconds(60)
            var childDone = false
            while received.count < count && ContinuousClock.now < deadline {
                let batch = try log.read(maxRecords: Int.random(in: 1...120))
                if batch.isEmpty {
                    if childDone { break }
                    childDone = child.lines.contains("done")
                    usleep(500)
                    continue
                }
                received += batch.seqs
                contents += batch.records.map { String(decoding: $0, as: UTF8.self) }
                try log.acknowledge(through: batch.end)
            }
            #expect(received == Array(0..<UInt64(count)))
            #expect(contents == (0..<count).map { numbered($0) })
            #expect(child.waitForExit() == 0)
            #expect(log.stats.skippedCorrupt == 0)
            try log.close()
            // A reopen deletes what the reader left behind (see readerDeletesEverySegmentItAcknowledged).
            try BeaconLog(configuration: smallConfig(dir)).close()
            #expect(try segmentNumbers(dir).count == 1)
            try expectClean(dir)
        }
    }

    /// A `.read` instance deletes every wholly acknowledged segment, including the one that was
    /// the writer's next segment when the reader opened.
    @Test(arguments: [0, 3])
    func readerDeletesEverySegmentItAcknowledged(segmentsBeforeReaderOpens: Int) throws {
        try withTemporaryDirectory { dir in
            let (writerConfig, readerConfig) = sidecarConfigs(dir)
            let writer = try BeaconLog(configuration: writerConfig)
            var i = 0
            while try segmentNumbers(dir).count < segmentsBeforeReaderOpens {
                try writer.append(numbered(i, pad: 40))
                i += 1
            }
            let reader = try BeaconLog(configuration: readerConfig)
            for _ in 0..<300 {
                try writer.append(numbered(i, pad: 40))
                i += 1
            }
            while true {
                let batch = try reader.read(maxRecords: 64)
                if batch.isEmpty { break }
                try reader.acknowledge(through: batch.end)
            }
            #expect(reader.checkpoint.seq == UInt64(i))
            let left = try segmentNumbers(dir)
            #expect(left.count == 1, "segments left after acknowledging everything: \(left)")
            try reader.close()
            try writer.close()
        }
    }
}
