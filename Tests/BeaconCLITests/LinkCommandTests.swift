import BeaconTesting
import Foundation
import Glibc
import Testing

/// Issue 32, tried as a user would, from outside: a file of the log directory replaced by a
/// symbolic link to a file elsewhere holding 87 bytes, then the command that writes that file run
/// as usual. The file behind the link keeps its bytes, and the command says which file is a link.
@Suite("beacon commands never write through a link planted in the log directory; unsafe directories are refused")
struct LinkCommandTests {
    static let content = Array("not a file of the log: 87 bytes that no command or library call may change, ever. 1234".utf8)

    /// A log directory with 3 events appended, a file outside it and a collector.
    func withPlantedLink(_ name: (String) throws -> String, _ body: (_ dir: String, _ outside: String, _ collector: LoopbackCollector) throws -> Void) throws {
        try withTemporaryDirectory { root in
            let dir = root + "/log"
            #expect(try BeaconToolRunner.run(["append", dir], stdin: stdinData(events(3))).status == 0)
            let outside = root + "/outside"
            #expect(FileManager.default.createFile(atPath: outside, contents: Data(Self.content)))
            let file = try name(dir)
            unlink(dir + "/" + file)
            #expect(symlink(outside, dir + "/" + file) == 0)
            let collector = try LoopbackCollector()
            defer { collector.stop() }
            try body(dir, outside, collector)
            #expect(Array(FileManager.default.contents(atPath: outside) ?? Data()) == Self.content, "the file behind \(file) changed")
        }
    }

    func newestSegment(_ dir: String) throws -> String {
        try #require(try FileManager.default.contentsOfDirectory(atPath: dir).filter { $0.hasSuffix(".jsonl") }.sorted().last)
    }

    @Test("beacon send: delivery.inflight, reader.lock and checkpoint as links are refused, naming the file", arguments: ["delivery.inflight", "reader.lock", "checkpoint"])
    func send(_ file: String) throws {
        try withPlantedLink({ _ in file }) { dir, _, collector in
            let result = try BeaconToolRunner.run(["send", dir, "--url", collector.url.absoluteString, "--retries", "1"])
            #expect(result.status == 74, "\(result.stderr)")
            #expect(result.stderr.contains("\(dir)/\(file) is a symbolic link"), "\(result.stderr)")
        }
    }

    @Test("beacon send to a collector answering 400: rejected.jsonl as a link is refused; nothing is set aside or acknowledged")
    func rejected() throws {
        try withPlantedLink({ _ in "rejected.jsonl" }) { dir, _, collector in
            collector.defaultReply = .status(400, body: "bad event")
            let result = try BeaconToolRunner.run(["send", dir, "--url", collector.url.absoluteString, "--retries", "1"])
            #expect(result.status != 0, "\(result.stderr)")
            // A collector refusing every single event is now a configuration problem (nothing is set
            // aside); when one is set aside, appending to the link is refused (linkedFile).
            #expect(result.stderr.contains("rejected.jsonl is a symbolic link") || result.stderr.contains("no event was set aside"), "\(result.stderr)")
            let status = try BeaconToolRunner.run(["status", dir, "--json"])
            #expect(status.stdoutText.contains(#""pending_records":3"#), "\(status.stdoutText)")
        }
    }

    @Test("beacon append: the newest segment and writer.lock as links are refused, naming the file", arguments: ["newest segment", "writer.lock"])
    func append(_ which: String) throws {
        try withPlantedLink({ dir in which == "writer.lock" ? which : try newestSegment(dir) }) { dir, _, _ in
            let result = try BeaconToolRunner.run(["append", dir], stdin: stdinData(events(2, from: 3)))
            #expect(result.status == 74, "\(result.stderr)")
            #expect(result.stderr.contains("is a symbolic link"), "\(result.stderr)")
        }
    }

    @Test("beacon track: identity.json as a link is neither read, written through nor replaced; the event is still recorded")
    func track() throws {
        try withPlantedLink({ _ in "identity.json" }) { dir, _, _ in
            let result = try BeaconToolRunner.run(["track", dir, "Purchase"])
            #expect(result.stderr.contains("identity.json is a symbolic link"), "\(result.stderr)")
            var st = stat()
            #expect(lstat(dir + "/identity.json", &st) == 0 && (st.st_mode & S_IFMT) == S_IFLNK, "the link is left for the operator to look at")
        }
    }

    @Test("a log directory every user may write (0777) is refused by every command, naming chmod 700; BEACON_DIRECTORY_SHARING=group allows a group-writable one")
    func unsafeDirectory() throws {
        try withTemporaryDirectory { dir in
            #expect(try BeaconToolRunner.run(["append", dir], stdin: stdinData(events(3))).status == 0)
            #expect(chmod(dir, 0o777) == 0)
            let collector = try LoopbackCollector()
            defer { collector.stop() }
            for arguments in [["append", dir], ["track", dir, "E"], ["send", dir, "--url", collector.url.absoluteString], ["drain", dir], ["cat", dir]] {
                let result = try BeaconToolRunner.run(arguments, stdin: stdinData(events(1)))
                #expect(result.status == 74, "\(arguments[0]): \(result.stderr)")
                #expect(result.stderr.contains("chmod 700 \(dir)"), "\(arguments[0]): \(result.stderr)")
            }
            #expect(collector.requests.isEmpty)
            #expect(chmod(dir, 0o770) == 0)
            #expect(try BeaconToolRunner.run(["append", dir], stdin: stdinData(events(1))).status == 74)
            let shared = try BeaconToolRunner.run(["append", dir], stdin: stdinData(events(1, from: 3)), environment: ["BEACON_DIRECTORY_SHARING": "group"])
            #expect(shared.status == 0, "\(shared.stderr)")
        }
    }
}
