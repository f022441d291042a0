import FaultInjection
import Foundation
import Glibc
import Synchronization
import Testing
@testable import BeaconLog

/// A file outside the log holding 87 bytes that must stay as they are, whatever is planted in the
/// log directory in place of one of its files.
struct OutsideFile {
    static let content = Array("not a file of the log: 87 bytes that no command or library call may change, ever. 1234".utf8)
    let path: String

    init(in root: String) throws {
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        path = root + "/outside-\(UUID().uuidString)"
        try writeFile(path, Self.content)
    }

    /// `name` in `dir` made a symbolic link to this file (replacing whatever was there).
    func plantLink(_ name: String, in dir: String) throws {
        unlink(dir + "/" + name)
        #expect(symlink(path, dir + "/" + name) == 0, "symlink: \(String(cString: strerror(errno)))")
    }

    func expectUnchanged(sourceLocation: SourceLocation = #_sourceLocation) throws {
        #expect(try fileBytes(path) == Self.content, "the file behind the link changed", sourceLocation: sourceLocation)
    }
}

/// No file of a log directory is ever written, truncated or appended through a link, whatever
/// the call, and a link planted between two operations is refused too (issue 32).
@Suite struct LinkSafetyTests {
    static let fileLinks = ["newest segment", "older segment", "checkpoint", "writer.lock", "reader.lock"]

    /// A log of 60 records in several segments, 10 acknowledged; returns the segment numbers.
    func prepared(_ dir: String) throws -> [UInt64] {
        let log = try BeaconLog(configuration: smallConfig(dir, durability: .everyRecord))
        for i in 0..<60 { try log.append(numbered(i, pad: 100)) }
        try log.acknowledge(through: try log.read(maxRecords: 10).end)
        try log.close()
        let numbers = try segmentNumbers(dir)
        #expect(numbers.count >= 3)
        return numbers
    }

    func name(_ which: String, _ numbers: [UInt64]) -> String {
        switch which {
        case "newest segment": SegmentName.fileName(numbers.last!)
        case "older segment": SegmentName.fileName(numbers[numbers.count - 2])
        default: which
        }
    }

    /// Opening, appending, reading, acknowledging and closing: the whole life of a log.
    func useLog(_ dir: String, access: BeaconLog.Access = .readWrite) throws {
        var config = smallConfig(dir, durability: .everyRecord)
        config.access = access
        let log = try BeaconLog(configuration: config)
        if access != .read {
            for i in 0..<5 { try log.append(numbered(100 + i, pad: 100)) }
        }
        if access != .write {
            while true {
                let batch = try log.read(maxRecords: 7)
                if batch.records.isEmpty { break }
                try log.acknowledge(through: batch.end)
            }
        }
        try log.close()
    }

    @Test("a link in place of a file of the log is refused with an error naming the file; the file behind it keeps its 87 bytes", arguments: fileLinks)
    func linkInPlaceOfAFile(_ which: String) throws {
        try withTemporaryDirectory { root in
            let dir = root + "/log"
            let numbers = try prepared(dir)
            let outside = try OutsideFile(in: root + "/elsewhere")
            let file = name(which, numbers)
            try outside.plantLink(file, in: dir)
            let error = expectLogError(.linkedFile) { try useLog(dir) }
            #expect(error?.path == dir + "/" + file)
            #expect(error?.message.contains("rm \(dir)/\(file)") == true, "\(error.map(String.init(describing:)) ?? "")")
            try outside.expectUnchanged()
            // The link is left where it was, for the operator to look at: not followed, not removed.
            var st = stat()
            #expect(lstat(dir + "/" + file, &st) == 0 && (st.st_mode & S_IFMT) == S_IFLNK)
        }
    }

    @Test("each role alone (writer, reader) refuses the link it meets and never writes through it", arguments: fileLinks, [BeaconLog.Access.write, .read])
    func linkMetByOneRole(_ which: String, _ access: BeaconLog.Access) throws {
        try withTemporaryDirectory { root in
            let dir = root + "/log"
            let numbers = try prepared(dir)
            let outside = try OutsideFile(in: root + "/elsewhere")
            try outside.plantLink(name(which, numbers), in: dir)
            try? useLog(dir, access: access)
            try outside.expectUnchanged()
        }
    }

    @Test("links at names the log creates or replaces (counters, temporary files) are replaced or removed, never written through", arguments: ["writer.counters", "reader.counters", "checkpoint.tmp", "writer.counters.tmp", "reader.counters.tmp"])
    func linkAtAReplacedName(_ file: String) throws {
        try withTemporaryDirectory { root in
            let dir = root + "/log"
            _ = try prepared(dir)
            let outside = try OutsideFile(in: root + "/elsewhere")
            try outside.plantLink(file, in: dir)
            try useLog(dir)
            try outside.expectUnchanged()
        }
    }

    @Test("a second hard link in place of a file the log writes is refused before anything is written", arguments: ["writer.lock", "reader.lock", "newest segment"])
    func hardLink(_ which: String) throws {
        try withTemporaryDirectory { root in
            let dir = root + "/log"
            let numbers = try prepared(dir)
            let outside = try OutsideFile(in: root + "/elsewhere")
            let file = name(which, numbers)
            unlink(dir + "/" + file)
            #expect(link(outside.path, dir + "/" + file) == 0, "link: \(String(cString: strerror(errno)))")
            let error = expectLogError(.linkedFile) { try useLog(dir) }
            #expect(error?.message.contains("2 hard links") == true, "\(error.map(String.init(describing:)) ?? "")")
            try outside.expectUnchanged()
        }
    }

    /// The race: the file is there when the log looks, and a link when it opens it (the fault
    /// seam's hook runs just before the open).
    @Test("a file swapped for a link between two operations (after the directory was opened) is refused at the next open", arguments: ["writer.lock", "reader.lock", "checkpoint", "newest segment"])
    func linkPlantedBetweenOperations(_ which: String) throws {
        try withTemporaryDirectory { root in
            let dir = root + "/log"
            let numbers = try prepared(dir)
            let outside = try OutsideFile(in: root + "/elsewhere")
            let file = name(which, numbers)
            let fs = FaultyFileSystem()
            let planted = Mutex(false)
            fs.beforeCall = { operation, path in
                guard operation == .open, path == dir + "/" + file else { return }
                let first = planted.withLock { done in
                    defer { done = true }
                    return !done
                }
                if first { try? outside.plantLink(file, in: dir) }
            }
            let error = expectLogError(.linkedFile) {
                let log = try BeaconLog(configuration: faultyConfig(dir, fs))
                defer { try? log.close() }
                try log.append("after")
                try log.acknowledge(through: try log.read().end)
            }
            #expect(planted.withLock { $0 })
            #expect(error?.path == dir + "/" + file)
            try outside.expectUnchanged()
        }
    }

    @Test("the directory swapped for a link to another while the log is open: the log keeps writing into the directory it opened")
    func directorySwappedWhileOpen() throws {
        try withTemporaryDirectory { root in
            let dir = root + "/log"
            let other = root + "/other"
            try FileManager.default.createDirectory(atPath: other, withIntermediateDirectories: true)
            let log = try BeaconLog(configuration: smallConfig(dir, durability: .everyRecord))
            try log.append("before")
            #expect(rename(dir, root + "/moved") == 0)
            #expect(symlink(other, dir) == 0)
            for i in 0..<60 { try log.append(numbered(i, pad: 100)) }
            try log.acknowledge(through: try log.read(maxRecords: 20).end)
            try log.close()
            #expect(try FileManager.default.contentsOfDirectory(atPath: other).isEmpty)
            #expect(try segmentNumbers(root + "/moved").count >= 2)
        }
    }

    @Test("a log directory path that is itself a symbolic link is refused, naming it and the real path to use; with a trailing slash too", arguments: ["", "/"])
    func directoryPathIsALink(_ suffix: String) throws {
        try withTemporaryDirectory { root in
            let real = root + "/real"
            try FileManager.default.createDirectory(atPath: real, withIntermediateDirectories: true)
            #expect(symlink(real, root + "/link") == 0)
            let error = expectLogError(.linkedFile) { _ = try BeaconLog(configuration: smallConfig(root + "/link" + suffix)) }
            #expect(error?.message.contains("realpath") == true)
            #expect(try FileManager.default.contentsOfDirectory(atPath: real).isEmpty)
        }
    }

    @Test("the library calls of the tools (verify, lockHolder) do not follow a link either")
    func inspectionCalls() throws {
        try withTemporaryDirectory { root in
            let dir = root + "/log"
            let numbers = try prepared(dir)
            let outside = try OutsideFile(in: root + "/elsewhere")
            try outside.plantLink("writer.lock", in: dir)
            try outside.plantLink(SegmentName.fileName(numbers[0]), in: dir)
            #expect(BeaconLog.lockHolder(.writer, directory: dir) == nil)
            _ = try BeaconLog.verify(directory: dir)
            try outside.expectUnchanged()
        }
    }
}
