import Foundation
import Glibc
import Testing
import BeaconTestTraits

/// Every `beacon` command with every shape of directory path, relative ones resolved against the
/// tool's current directory.
@Suite("beacon with every directory path shape", .blocking)
struct DirectoryPathToolTests {
    static let shapes = ["d", "d/", "./d", "./d/", "a/b", "a/b/", "x/y/z/w", "x/y/z/w/", "a/../d", "with space/d d", "données/événements/", "ABSOLUTE/n/e/s/t/", "ABSOLUTE/../up/d"]

    /// `shape` as given to the tool: `ABSOLUTE` stands for the temporary root.
    static func path(_ shape: String, root: String) -> String {
        shape.replacingOccurrences(of: "ABSOLUTE", with: root)
    }

    /// A fresh directory to run the tool in, one level below a fresh temporary directory, so that
    /// `ABSOLUTE/../up/d` stays inside what the test removes (it escaped to `/tmp/up/d`, shared by
    /// every run on the machine and left behind).
    static func withRoot(_ body: (String) throws -> Void) throws {
        try withTemporaryDirectory { top in
            let root = top + "/root"
            try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
            try body(root)
        }
    }

    @Test("append, track, cat, status, verify and drain work on a new directory of every shape", arguments: shapes)
    func everyCommand(_ shape: String) throws {
        try Self.withRoot { root in
            let dir = Self.path(shape, root: root)
            func run(_ arguments: [String], stdin: Data = Data()) throws -> ToolResult {
                try BeaconToolRunner.run(arguments, stdin: stdin, currentDirectory: root)
            }
            let appended = try run(["append", dir, "--sync", "each"], stdin: stdinData(events(3)))
            #expect(appended.status == 0, "append \(dir): \(appended.stderr)")
            let tracked = try run(["track", dir, "Signup", "plan=pro"])
            #expect(tracked.status == 0, "track \(dir): \(tracked.stderr)")
            let cat = try run(["cat", dir])
            #expect(cat.status == 0, "cat \(dir): \(cat.stderr)")
            #expect(Array(cat.stdoutLines.prefix(3)) == events(3))
            #expect(cat.stdoutLines.count == 4 && cat.stdoutLines.last?.contains(#""Signup""#) == true)
            let status = try run(["status", dir, "--json"])
            #expect(status.status == 0 && status.stdoutText.contains(#""pending_records":4"#), "status \(dir): \(status.stdoutText) \(status.stderr)")
            let verify = try run(["verify", dir])
            #expect(verify.status == 0, "verify \(dir): \(verify.stdoutText) \(verify.stderr)")
            let drained = try run(["drain", dir])
            #expect(drained.status == 0 && drained.stdoutLines.count == 4, "drain \(dir): \(drained.stderr)")
            #expect(try run(["cat", dir]).stdoutLines.isEmpty)
            // What the tool created is private: 0700 for the directory and each parent it made.
            let absolute = dir.hasPrefix("/") ? dir : root + "/" + dir
            var st = stat()
            #expect(stat(absolute, &st) == 0 && st.st_mode & 0o777 == 0o700)
        }
    }

    @Test("send uploads from a directory of every shape")
    func sendEveryShape() throws {
        try Self.withRoot { root in
            let out = root + "/collected.jsonl"
            let (collector, url) = try startCollector(out: out)
            defer { _ = collector.signal(SIGTERM) }
            var expected: [String] = []
            for (index, shape) in Self.shapes.enumerated() {
                let dir = Self.path(shape.replacingOccurrences(of: "d", with: "s\(index)"), root: root)
                let batch = events(2, from: 10 * index)
                #expect(try BeaconToolRunner.run(["append", dir], stdin: stdinData(batch), currentDirectory: root).status == 0)
                let sent = try BeaconToolRunner.run(["send", dir, "--url", url], currentDirectory: root)
                #expect(sent.status == 0, "send \(dir): \(sent.stderr)")
                expected += batch
            }
            #expect(eventually { lines(of: out).count == expected.count })
            #expect(lines(of: out) == expected)
        }
    }

    @Test("reading commands on a missing directory fail with 74 naming it, and create nothing",
          arguments: ["cat", "status", "verify", "drain", "send"], ["d", "a/b/", "ABSOLUTE/x/y"])
    func readingMissing(command: String, shape: String) throws {
        try Self.withRoot { root in
            let dir = Self.path(shape, root: root)
            let arguments = command == "send" ? ["send", dir, "--url", "http://127.0.0.1:9/"] : [command, dir]
            let result = try BeaconToolRunner.run(arguments, currentDirectory: root)
            #expect(result.status == 74, "\(command) \(dir): \(result.status) \(result.stderr)")
            #expect(result.stderr.contains("cannot open log directory \(dir)") && result.stderr.contains("check the path"), "\(result.stderr)")
            #expect(try FileManager.default.contentsOfDirectory(atPath: root).isEmpty, "\(command) created something")
        }
    }

    /// Paths that cannot be a log directory: the kind of problem and the words the message must hold.
    static let badPaths: [(name: String, path: String, says: String)] = [
        ("a regular file", "file", "not a directory"),
        ("under a regular file", "file/d", "is a file"),
        ("deep under a regular file", "file/d/e/", "is a file"),
        ("a name too long", String(repeating: "n", count: 300), "too long"),
        ("a path too long", String(repeating: "abcdefghijklmnop/", count: 260), "too long"),
    ]

    @Test("a path that cannot be a log directory: every command exits 74 with a clear message, never a crash",
          arguments: ["append", "track", "cat", "status", "verify", "drain", "send"], 0..<5)
    func badPath(command: String, which: Int) throws {
        let bad = Self.badPaths[which]
        try Self.withRoot { root in
            try Data("not a log\n".utf8).write(to: URL(fileURLWithPath: root + "/file"))
            let arguments: [String] = switch command {
            case "track": ["track", bad.path, "Signup"]
            case "send": ["send", bad.path, "--url", "http://127.0.0.1:9/"]
            default: [command, bad.path]
            }
            let result = try BeaconToolRunner.run(arguments, stdin: stdinData(events(1)), currentDirectory: root)
            #expect(result.status == 74, "\(command) on \(bad.name): exit \(result.status): \(result.stderr)")
            #expect(result.stderr.hasPrefix("beacon \(command): "), "\(result.stderr)")
            let mentionsPath = result.stderr.contains(String(bad.path.prefix(200)).trimmingCharacters(in: ["/"]))
            let explains = result.stderr.contains(bad.says) || result.stderr.contains("check the path")
            #expect(mentionsPath && explains, "\(command) on \(bad.name): \(result.stderr)")
            #expect(try fileBytes(root + "/file") == Array("not a log\n".utf8))
        }
    }
}

private func fileBytes(_ path: String) throws -> [UInt8] {
    Array(try Data(contentsOf: URL(fileURLWithPath: path)))
}
