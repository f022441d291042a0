import BeaconTesting
import Foundation
import Glibc
import Testing
import BeaconTestTraits

/// Issue 32, tried as a user would, from outside: a file of the log directory replaced by a
/// symbolic link to a file elsewhere holding 87 bytes, then the command that writes that file run
/// as usual. The file behind the link keeps its bytes, and the command says which file is a link.
@Suite("beacon commands never write through a link planted in the log directory; unsafe directories are refused", .blocking)
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

    /// What is planted in place of a file of the log directory.
    enum Planted: String, CustomStringConvertible, CaseIterable {
        case symbolicLink, hardLink, fifo, socket, device
        var description: String { rawValue }

        /// What the error says the file is.
        var phrase: String {
            switch self {
            case .symbolicLink: "is a symbolic link"
            case .hardLink: "is a file with 2 hard links"
            case .fifo: "is a FIFO"
            case .socket: "is a socket"
            case .device: "is a character device"
            }
        }

        /// Plants it at `path` (whatever was there is removed first); `outside` is the file a link
        /// points to. Returns false when this system does not allow it (mknod needs CAP_MKNOD).
        func plant(at path: String, outside: String) -> Bool {
            unlink(path)
            switch self {
            case .symbolicLink: return symlink(outside, path) == 0
            case .hardLink: return link(outside, path) == 0
            case .fifo: return mkfifo(path, 0o600) == 0
            case .socket:
                // A bound unix socket leaves its file; the descriptor itself is not needed.
                let fd = Glibc.socket(AF_UNIX, Int32(SOCK_STREAM.rawValue), 0)
                guard fd >= 0 else { return false }
                defer { close(fd) }
                var address = sockaddr_un()
                address.sun_family = sa_family_t(AF_UNIX)
                let bytes = Array(path.utf8)
                guard bytes.count < MemoryLayout.size(ofValue: address.sun_path) else { return false }
                withUnsafeMutableBytes(of: &address.sun_path) { raw in
                    for (i, b) in bytes.enumerated() { raw[i] = b }
                }
                return withUnsafePointer(to: &address) {
                    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_un>.size)) }
                } == 0
            case .device:
                // /dev/null's numbers: writes there would vanish without an error.
                return mknod(path, S_IFCHR | 0o600, dev_t((1 << 8) | 3)) == 0
            }
        }
    }

    /// The files of issue 32's table, with the command that writes each.
    static let commandOfFile: [(file: String, command: String)] = [
        ("delivery.inflight", "send"), ("reader.lock", "send"), ("checkpoint", "send"),
        ("newest segment", "append"), ("writer.lock", "append"), ("identity.json", "track"),
    ]

    /// A log directory with 3 events appended (and, for `track`, an identity), `planted` in place
    /// of `file`, then the command that writes that file.
    @Test("a hard link, a FIFO, a socket or a device in place of a file of the log directory is refused by the command that writes it, naming the file; nothing is written through, nothing blocks",
          arguments: [Planted.hardLink, .fifo, .socket, .device], commandOfFile.indices)
    func plantedInPlaceOfAFile(_ planted: Planted, _ index: Int) throws {
        let (which, command) = Self.commandOfFile[index]
        try withTemporaryDirectory { root in
            let dir = root + "/log"
            #expect(try BeaconToolRunner.run(["append", dir], stdin: stdinData(events(3))).status == 0)
            if command == "track" { #expect(try BeaconToolRunner.run(["track", dir, "First"]).status == 0) }
            let outside = root + "/outside"
            #expect(FileManager.default.createFile(atPath: outside, contents: Data(Self.content)))
            let file = which == "newest segment" ? try newestSegment(dir) : which
            guard planted.plant(at: dir + "/" + file, outside: outside) else {
                print("SKIPPED: \(planted) cannot be made here (\(String(cString: strerror(errno)))); \(file) not tried with it")
                return
            }
            let collector = try LoopbackCollector()
            defer { collector.stop() }
            let arguments: [String]
            switch command {
            case "send": arguments = ["send", dir, "--url", collector.url.absoluteString, "--retries", "1"]
            case "append": arguments = ["append", dir]
            default: arguments = ["track", dir, "Purchase"]
            }
            // A FIFO opened for reading without a writer blocks: an old build hangs here.
            let result = try BeaconToolRunner.run(arguments, stdin: stdinData(events(2, from: 3)), timeout: .seconds(60))
            #expect(result.stderr.contains("\(dir)/\(file) \(planted.phrase)"), "\(command): \(result.stderr)")
            #expect(result.stderr.contains("rm \(dir)/\(file)"), "the message says what to do: \(result.stderr)")
            if command == "track" {
                // The event is still recorded, with an identity for this run.
                #expect(result.status == 0, "\(result.stderr)")
            } else {
                #expect(result.status == 74, "\(command): \(result.stderr)")
                #expect(collector.requests.isEmpty, "nothing is sent while a file of the log is refused")
            }
            #expect(Array(FileManager.default.contents(atPath: outside) ?? Data()) == Self.content, "the file behind \(file) changed")
            // What was planted is left for the operator to look at.
            var st = stat()
            #expect(lstat(dir + "/" + file, &st) == 0)
            if planted == .hardLink { #expect(st.st_nlink == 2) } else { #expect((st.st_mode & S_IFMT) != S_IFREG) }
        }
    }

    /// The strong case of `rejected.jsonl`: a collector that refuses one event (400 for any batch
    /// holding it, 200 otherwise) among accepted ones, so that one event really is to be set aside.
    @Test("a collector refusing one event among accepted ones, rejected.jsonl planted (symbolic or hard link, FIFO): refused naming it, the file behind unchanged, the refused event still pending until the link is removed, then set aside; every other event delivered",
          arguments: [Planted.symbolicLink, .hardLink, .fifo])
    func rejectedAmongAccepted(_ planted: Planted) throws {
        try withTemporaryDirectory { root in
            let dir = root + "/log"
            #expect(try BeaconToolRunner.run(["append", dir], stdin: stdinData(events(10))).status == 0)
            let outside = root + "/outside"
            #expect(FileManager.default.createFile(atPath: outside, contents: Data(Self.content)))
            #expect(planted.plant(at: dir + "/rejected.jsonl", outside: outside))
            let collector = try LoopbackCollector()
            defer { collector.stop() }
            collector.rejectMarker = #""_track_id":4,"#
            let send = ["send", dir, "--url", collector.url.absoluteString, "--retries", "2"]

            let first = try BeaconToolRunner.run(send, timeout: .seconds(120))
            #expect(first.status != 0, "\(first.stderr)")
            #expect(first.stderr.contains("\(dir)/rejected.jsonl \(planted.phrase)"), "\(first.stderr)")
            #expect(first.stderr.contains("rm \(dir)/rejected.jsonl"), "the message says what to do: \(first.stderr)")
            #expect(Array(FileManager.default.contents(atPath: outside) ?? Data()) == Self.content, "the file behind rejected.jsonl changed")
            let accepted = Set(collector.acceptedEvents.compactMap(Self.trackID))
            #expect(!accepted.contains(4))
            #expect(accepted.isSuperset(of: 0..<4), "the events before the refused one are delivered: \(accepted.sorted())")
            // The refused event is not lost: still pending, the checkpoint before it.
            let pending = try statusJSON(dir)
            #expect((pending["pending_records"] as? Int ?? 0) >= 6, "\(pending)")

            // The operator removes what was planted: the next send sets the event aside and ends.
            #expect(unlink(dir + "/rejected.jsonl") == 0)
            let second = try BeaconToolRunner.run(send, timeout: .seconds(120))
            #expect(second.status == 0, "\(second.stderr)")
            let rejected = String(decoding: FileManager.default.contents(atPath: dir + "/rejected.jsonl") ?? Data(), as: UTF8.self)
            #expect(rejected.contains(#""_track_id":4,"#), "\(rejected)")
            #expect(rejected.split(separator: "\n").count == 1, "only the refused event is set aside: \(rejected)")
            let all = Set(collector.acceptedEvents.compactMap(Self.trackID))
            #expect(all == Set(0..<10).subtracting([4]), "every other event reached the collector: \(all.sorted())")
            #expect(try statusJSON(dir)["pending_records"] as? Int == 0)
            #expect(Array(FileManager.default.contents(atPath: outside) ?? Data()) == Self.content)
        }
    }

    /// The `_track_id` of an event's JSON bytes.
    static func trackID(_ event: [UInt8]) -> Int? {
        (try? JSONSerialization.jsonObject(with: Data(event)) as? [String: Any])?["_track_id"] as? Int
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
