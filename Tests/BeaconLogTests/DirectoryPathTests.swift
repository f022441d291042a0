import Foundation
import Glibc
import Testing
import BeaconTestTraits
@testable import BeaconLog
import FaultInjection

/// Every shape of directory path a user may configure, and creating the directory durably.
@Suite("Directory paths", .blocking)
struct DirectoryPathTests {
    /// Relative shapes, resolved against the current directory of the process that opens the log.
    static let relativeShapes = ["d", "d/", "./d", "./d/", "a/b", "a/b/", "x/y/z/w", "x/y/z/w/", "a/../d", "a/./b//c", "with space/d d", "données/événements/", "日志"]

    /// Absolute shapes, appended to a fresh temporary root that does not exist yet.
    static let absoluteShapes = ["/d", "/d/", "/a/b/c", "/a/b/c/", "/a/../b", "/with space/ü/", "/x//y"]

    /// Every directory under `root`, `root` included, has mode 0700.
    static func expectPrivateDirectories(under root: String, sourceLocation: SourceLocation = #_sourceLocation) throws {
        var paths = [root]
        for sub in try FileManager.default.subpathsOfDirectory(atPath: root) {
            var isDirectory: ObjCBool = false
            if FileManager.default.fileExists(atPath: root + "/" + sub, isDirectory: &isDirectory), isDirectory.boolValue {
                paths.append(root + "/" + sub)
            }
        }
        for path in paths {
            var st = stat()
            #expect(stat(path, &st) == 0 && st.st_mode & 0o777 == 0o700, "\(path) has mode \(String(st.st_mode & 0o777, radix: 8))", sourceLocation: sourceLocation)
        }
    }

    @Test("parentDirectory works on the path's bytes", arguments: [
        ("d", "."), ("d/", "."), ("./d", "."), ("a/b", "a"), ("a/b/", "a"), ("a//b", "a"), ("/d", "/"), ("/", "/"),
        ("//d", "/"), ("x/y/z/w", "x/y/z"), ("a/..", "a"), ("ü/ß", "ü"), ("with space/d", "with space"),
    ])
    func parentOfEveryShape(path: String, parent: String) {
        #expect(parentDirectory(of: path) == parent)
    }

    @Test("a relative directory is created (0700, parents too) and used by BeaconLog", arguments: relativeShapes)
    func relativeShape(_ shape: String) throws {
        try withTemporaryDirectory { root in
            try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
            // A child process, so that its current directory can be `root` without moving this one's.
            for _ in 0..<2 {  // the second run opens what the first created
                let child = try ChildProcess(["log", shape, "every", "3"], currentDirectory: root)
                #expect(child.waitForExit() == 0, "beacon-test-child log \(shape) failed: \(child.lines)")
            }
            let log = try BeaconLog(configuration: smallConfig(root + "/" + shape))
            #expect(try readAll(log).records == (0..<6).map { numbered($0) })
            try log.close()
            try Self.expectPrivateDirectories(under: root)
        }
    }

    @Test("an absolute directory is created (0700, parents too) and reopened", arguments: absoluteShapes)
    func absoluteShape(_ shape: String) throws {
        try withTemporaryDirectory { root in
            for round in 0..<2 {
                let log = try BeaconLog(configuration: smallConfig(root + shape, durability: .everyRecord))
                try log.append(numbered(round))
                try log.close()
            }
            let log = try BeaconLog(configuration: smallConfig(root + shape))
            #expect(try readAll(log).records == [numbered(0), numbered(1)])
            try log.close()
            try Self.expectPrivateDirectories(under: root)
        }
    }

    @Test("Beacon opens a relative directory such as data/events", arguments: ["data/events", "d", "e/v/"])
    func trackerRelativeShape(_ shape: String) throws {
        try withTemporaryDirectory { root in
            try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: false)
            let child = try ChildProcess(["track", shape, "5"], currentDirectory: root)
            defer { child.kill9() }
            try child.waitForLine { $0 == "done" }
            child.kill9()
            let log = try BeaconLog(configuration: smallConfig(root + "/" + shape))
            #expect(try readAll(log).records.count == 5)
            try log.close()
        }
    }

    @Test("each created directory's entry is made durable: its parent is fsynced before any record")
    func parentsAreSyncedBeforeTheFirstRecord() throws {
        try withTemporaryDirectory { root in
            let fs = FaultyFileSystem()
            let dir = root + "/a/b/c/"
            let log = try BeaconLog(configuration: faultyConfig(dir, fs))
            try log.append(numbered(0))
            try log.close()
            let journal = fs.journal.map { (operation: $0.operation, path: $0.path) }
            let firstOpen = journal.firstIndex { $0.operation == .open } ?? -1
            let created = [root, root + "/a", root + "/a/b", root + "/a/b/c"]
            for directory in created {
                let parent = parentDirectory(of: directory)
                let made = journal.lastIndex { $0.operation == .makeDirectory && $0.path == directory } ?? Int.max
                let synced = journal.firstIndex { $0.operation == .syncDirectory && $0.path == parent } ?? Int.max
                let inOrder = made < synced && synced < firstOpen
                #expect(inOrder, "\(directory): mkdir at \(made), parent fsync at \(synced), first open at \(firstOpen)")
            }
            try Self.expectPrivateDirectories(under: root)

            // Opening an existing directory creates and syncs nothing above it.
            fs.resetJournal()
            try BeaconLog(configuration: faultyConfig(dir, fs)).close()
            #expect(fs.calls(.syncDirectory).allSatisfy { $0.path.hasPrefix(root + "/a/b/c") })
        }
    }

    @Test("a failing fsync of a new directory's parent is reported, naming that parent", arguments: 0..<4)
    func failingParentSyncIsReported(level: Int) throws {
        try withTemporaryDirectory { root in
            let parents = [parentDirectory(of: root), root, root + "/a", root + "/a/b"]
            let fs = FaultyFileSystem()
            fs.inject(.syncDirectory, errno: EIO, path: parents[level], onCall: 1)
            let error = expectLogError(.io) { _ = try BeaconLog(configuration: faultyConfig(root + "/a/b/c", fs)) }
            #expect(error?.path == parents[level])
            #expect(error?.errno == EIO)
            #expect(fs.calls(.open).isEmpty, "no file may be created in a directory whose entry is not durable")
        }
    }

    @Test("a regular file in the way is a clear error naming the path", arguments: ["", "/d", "/d/e/"])
    func fileInTheWay(suffix: String) throws {
        try withTemporaryDirectory { root in
            try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: false)
            let file = root + "/file"
            try writeFile(file, Array("not a directory\n".utf8))
            let error = expectLogError(.io) { _ = try BeaconLog(configuration: smallConfig(file + suffix)) }
            #expect(error?.errno == ENOTDIR)
            #expect(error?.path?.hasPrefix(file) == true)
            #expect(error?.message.contains("is a file; choose another path") == true, "\(String(describing: error))")
            #expect(try fileBytes(file) == Array("not a directory\n".utf8))
        }
    }

    @Test("a path that is too long is a clear error", arguments: [
        "/" + String(repeating: "n", count: 256),  // one name over NAME_MAX
        String(repeating: "/abcdefghijklmnopqrstuvwxyz", count: 160),  // the whole path over PATH_MAX
    ])
    func tooLong(suffix: String) throws {
        try withTemporaryDirectory { root in
            let error = expectLogError(.io) { _ = try BeaconLog(configuration: smallConfig(root + suffix)) }
            #expect(error?.errno == ENAMETOOLONG)
            #expect(error?.message.contains("too long") == true, "\(String(describing: error))")
        }
    }

    @Test("a parent this user may not write to is a clear error",
          .enabled(if: getuid() != 0, "SKIPPED: running as root, for whom directory permissions never refuse mkdir; run as another user to check EACCES"))
    func unwritableParent() throws {
        try withTemporaryDirectory { root in
            try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o500])
            defer { chmod(root, 0o700) }
            let error = expectLogError(.permissionDenied) { _ = try BeaconLog(configuration: smallConfig(root + "/d")) }
            #expect(error?.errno == EACCES)
            #expect(error?.message.contains("permission denied") == true)
        }
    }

    @Test("read-only access never creates the directory")
    func readOnlyDoesNotCreate() throws {
        try withTemporaryDirectory { root in
            var config = smallConfig(root + "/d")
            config.access = .readOnly
            _ = expectLogError(.invalidArgument) { _ = try BeaconLog(configuration: config) }
            #expect(!FileManager.default.fileExists(atPath: root))
        }
    }
}
