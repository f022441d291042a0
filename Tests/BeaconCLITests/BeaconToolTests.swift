import BeaconLog
import BeaconTestSupport
import Foundation
import Glibc
import Testing
import BeaconTestTraits

/// The `beacon` executable, run as a user would.
@Suite(.blocking) struct BeaconToolTests {
    typealias Run = BeaconToolRunner

    // MARK: help and usage

    @Test func helpListsEveryCommandAndExitCode() throws {
        let help = try Run.run(["help"])
        #expect(help.status == 0)
        for name in ["append", "drain", "cat", "status", "verify", "help"] {
            #expect(help.stdoutText.contains("\n  \(name) "), "help lists \(name)")
        }
        for code in ["0  ok", "1  the command found a problem", "64  usage", "65  bad input", "74  I/O", "75  the directory is locked"] {
            #expect(help.stdoutText.contains(code), "help documents \(code)")
        }
        let none = try Run.run([])
        #expect(none.status == 64)
        #expect(none.stderr.contains("commands:"))
    }

    @Test(arguments: ["append", "drain", "cat", "status", "verify", "help"])
    func helpForACommandPrintsItsUsage(_ name: String) throws {
        for arguments in [["help", name], [name, "--help"]] {
            let result = try Run.run(arguments)
            #expect(result.status == 0)
            #expect(result.stdoutText.hasPrefix("usage: beacon \(name)"))
        }
    }

    @Test(arguments: [
        ["frobnicate"], ["help", "frobnicate"], ["append"], ["drain"], ["cat"], ["status"], ["verify"],
        ["append", "DIR", "--bogus"], ["drain", "DIR", "--all"], ["cat", "DIR", "--json"], ["status", "DIR", "--sync", "each"],
        ["verify", "DIR", "extra"], ["append", "DIR", "--sync", "sometimes"], ["append", "DIR", "--sync"],
        ["append", "DIR", "--max-bytes", "0"], ["drain", "DIR", "--batch", "0"], ["drain", "DIR", "--batch", "x"],
    ])
    func usageErrorsExit64WithAOneLineErrorAndUsage(_ arguments: [String]) throws {
        try withTemporaryDirectory { dir in
            let result = try Run.run(arguments.map { $0 == "DIR" ? dir : $0 })
            #expect(result.status == 64)
            let lines = result.stderr.split(separator: "\n")
            #expect(lines.first?.hasPrefix("beacon") == true)
            #expect(result.stderr.contains("usage: beacon") || result.stderr.contains("commands:"), "\(result.stderr)")
            #expect(!FileManager.default.fileExists(atPath: dir), "a usage error creates nothing")
        }
    }

    // MARK: append

    /// Valid lines among invalid ones of every kind: each refused line is named with its number
    /// and reason, exit 65, and the valid ones are appended in order.
    @Test func appendFromAPipeRefusesInvalidLinesAndKeepsTheRest() throws {
        try withTemporaryDirectory { dir in
            let bad = ["{\"a\":", "not json", "", "{\"a\":1}}", "[1,2,]", "\"ctrl\u{01}\"", "{\"k\":01}", "   ", "{'a':1}"]
            var lines: [String] = []
            var expected: [String] = []
            var badLines: [Int: String] = [:]
            for (i, event) in events(2000).enumerated() {
                if i % 7 == 3 {
                    let line = bad[(i / 7) % bad.count]
                    lines.append(line)
                    badLines[lines.count] = line
                }
                lines.append(i % 11 == 0 ? "  \(event) \r" : event)
                expected.append(event)
            }
            let result = try Run.run(["append", dir], stdin: stdinData(lines))
            #expect(result.status == 65)
            let reported = result.stderr.split(separator: "\n").filter { $0.hasPrefix("beacon append: line ") }
            #expect(reported.count == badLines.count)
            for (number, _) in badLines {
                #expect(result.stderr.contains("beacon append: line \(number): "), "line \(number) is reported")
            }
            #expect(result.stderr.contains("line 4: not JSON: the text ends where a value is expected"))
            #expect(result.stderr.contains("refused \(badLines.count) of \(lines.count) lines"))
            let cat = try Run.run(["cat", dir])
            #expect(cat.status == 0)
            #expect(cat.stdoutLines == expected)
            #expect(try statusJSON(dir)["pending_records"] as? Int == expected.count)
        }
    }

    @Test(arguments: ["each", "batch", "none"])
    func appendInEverySyncModeIsDurableAndVerifiesClean(_ mode: String) throws {
        try withTemporaryDirectory { dir in
            let records = events(mode == "each" ? 200 : 20_000)
            let result = try Run.run(["append", dir, "--sync", mode], stdin: stdinData(records))
            #expect(result.status == 0, "\(result.stderr)")
            #expect(result.stderr.isEmpty)
            let verify = try Run.run(["verify", dir])
            #expect(verify.status == 0)
            #expect(verify.stdoutText.hasPrefix("clean: \(records.count) records"))
            #expect(try Run.run(["cat", dir]).stdoutLines == records)
            // Appending again continues the sequence.
            let more = try Run.run(["append", dir, "--sync", mode], stdin: stdinData(["{\"last\":true}"]))
            #expect(more.status == 0)
            #expect(try statusJSON(dir)["next_seq"] as? Int == records.count + 1)
        }
    }

    @Test func appendTakesALastLineWithoutNewlineAndTooLargeLines() throws {
        try withTemporaryDirectory { dir in
            let big = "{\"pad\":\"" + String(repeating: "x", count: 200) + "\"}"
            let huge = "[\"" + String(repeating: "y", count: 3 << 20) + "\"]"  // longer than the read buffer
            let input = Data("{\"a\":1}\n\(big)\n{\"b\":2}\n\(huge)\n[3]".utf8)
            let result = try Run.run(["append", dir, "--max-bytes", "100"], stdin: input)
            #expect(result.status == 65)
            #expect(result.stderr.contains("line 2: too large: \(big.utf8.count) bytes, more than the limit of 100"))
            #expect(result.stderr.contains("line 4: too large: \(huge.utf8.count) bytes"))
            #expect(try Run.run(["cat", dir]).stdoutLines == ["{\"a\":1}", "{\"b\":2}", "[3]"])
        }
    }

    /// Past --max-disk the oldest segments go: counted in status and reported by append.
    @Test func appendReportsWhatTheDiskQuotaDropped() throws {
        try withTemporaryDirectory { dir in
            let records = events(120_000)  // about 27 MiB framed, over a 16 MiB quota
            let result = try Run.run(["append", dir, "--sync", "none", "--max-disk", "16MiB"], stdin: stdinData(records))
            #expect(result.status == 0)
            let status = try statusJSON(dir)
            let dropped = try #require((status["dropped"] as? [String: Int])?["quotaDeleted"])
            #expect(dropped > 0)
            #expect(result.stderr.contains("dropped \(dropped) of the oldest pending records"))
            // The first drop is said when it happens, once.
            #expect(result.stderr.components(separatedBy: "is full: dropping the oldest pending records").count == 2, "\(result.stderr)")
            #expect((status["disk_bytes"] as? Int ?? .max) <= 16 << 20)
            // What is left is the newest records, in order, ending with the last one.
            let left = try Run.run(["cat", dir, "--all"]).stdoutLines
            #expect(left == Array(records[(records.count - left.count)...]))
            // Pending counts what is left, not what was dropped (no checkpoint was ever written).
            #expect(status["pending_records"] as? Int == left.count)
        }
    }

    @Test func appendToADirectoryWithAWriterExits75NamingThePid() throws {
        try withTemporaryDirectory { dir in
            var config = BeaconLog.Configuration(directory: dir)
            config.access = .write
            let writer = try BeaconLog(configuration: config)
            defer { try? writer.close() }
            let result = try Run.run(["append", dir], stdin: stdinData(["{}"]))
            #expect(result.status == 75)
            #expect(result.stderr.contains("writer.lock"))
            #expect(result.stderr.contains("\(getpid())"))
        }
    }

    // MARK: drain

    @Test func drainIntoAFileAcknowledgesEverythingOnce() throws {
        try withTemporaryDirectory { dir in
            let records = events(5000)
            #expect(try Run.run(["append", dir], stdin: stdinData(records)).status == 0)
            let file = dir + "-drained.jsonl"
            defer { try? FileManager.default.removeItem(atPath: file) }
            let drain = try Run.run(["drain", dir, "--batch", "64"], stdoutFile: file)
            #expect(drain.status == 0, "\(drain.stderr)")
            let drained = String(decoding: fileContents(atPath: file) ?? Data(), as: UTF8.self)
            #expect(drained == records.joined(separator: "\n") + "\n")
            let status = try statusJSON(dir)
            #expect(status["pending_records"] as? Int == 0)
            #expect(status["acked_seq"] as? Int == records.count - 1)
            // Nothing pending: a second drain prints nothing and succeeds.
            let again = try Run.run(["drain", dir])
            #expect(again.status == 0)
            #expect(again.stdout.isEmpty)
        }
    }

    /// A consumer that is gone: the write fails (EPIPE), exit 74, and nothing is acknowledged.
    @Test func drainAcknowledgesNothingItCouldNotWrite() throws {
        try withTemporaryDirectory { dir in
            #expect(try Run.run(["append", dir], stdin: stdinData(events(300))).status == 0)
            let result = try Run.run(["drain", dir, "--batch", "50"], closedStdout: true)
            #expect(result.status == 74)
            #expect(result.stderr.contains("standard output"))
            let status = try statusJSON(dir)
            #expect(status["pending_records"] as? Int == 300)
            #expect(status["acked_seq"] is NSNull)
        }
    }

    @Test func drainWithAReaderRunningExits75() throws {
        try withTemporaryDirectory { dir in
            var config = BeaconLog.Configuration(directory: dir)
            config.access = .read
            let reader = try BeaconLog(configuration: config)
            defer { try? reader.close() }
            let result = try Run.run(["drain", dir])
            #expect(result.status == 75)
            #expect(result.stderr.contains("reader.lock"))
        }
    }

    // MARK: cat and status

    @Test func catShowsPendingAndAllShowsAcknowledgedToo() throws {
        try withTemporaryDirectory { dir in
            let records = events(100)
            #expect(try Run.run(["append", dir], stdin: stdinData(records)).status == 0)
            do {
                var config = BeaconLog.Configuration(directory: dir)
                config.access = .read
                let reader = try BeaconLog(configuration: config)
                try reader.acknowledge(through: reader.read(maxRecords: 40).end)
                try reader.close()
            }
            let cat = try Run.run(["cat", dir])
            #expect(cat.status == 0)
            #expect(cat.stdoutLines == Array(records[40...]))
            #expect(try Run.run(["cat", dir, "--all"]).stdoutLines == records)
            // cat never acknowledges.
            #expect(try statusJSON(dir)["pending_records"] as? Int == 60)
        }
    }

    @Test func statusJSONHasEveryKeyAndLockHolders() throws {
        try withTemporaryDirectory { dir in
            #expect(try Run.run(["append", dir], stdin: stdinData(events(10))).status == 0)
            var status = try statusJSON(dir)
            for key in ["pending_records", "pending_bytes", "acked_seq", "next_seq", "segments", "disk_bytes", "dropped",
                        "corrupt_skipped", "writer_pid", "reader_pid", "refused", "checkpoint"] {
                #expect(status[key] != nil, "status --json has \(key)")
            }
            #expect(status["pending_records"] as? Int == 10)
            #expect((status["pending_bytes"] as? Int ?? 0) > 10 * 150)
            #expect(status["next_seq"] as? Int == 10)
            #expect(status["segments"] as? Int == 1)
            #expect(status["dropped"] as? [String: Int] == [:])
            #expect(status["corrupt_skipped"] as? Int == 0)
            #expect(status["writer_pid"] is NSNull)
            #expect(status["reader_pid"] is NSNull)
            #expect(status["acked_seq"] is NSNull)
            let log = try BeaconLog(directory: dir)  // both locks, this process
            defer { try? log.close() }
            status = try statusJSON(dir)
            #expect(status["writer_pid"] as? Int == Int(getpid()))
            #expect(status["reader_pid"] as? Int == Int(getpid()))
            let text = try Run.run(["status", dir])
            #expect(text.status == 0)
            #expect(text.stdoutText.contains("pending:       10 records"))
            #expect(text.stdoutText.contains("writer lock:   held by pid \(getpid())"))
        }
    }

    @Test(arguments: [["status"], ["cat"], ["verify"], ["drain"]])
    func readingAMissingDirectoryExits74(_ command: [String]) throws {
        try withTemporaryDirectory { dir in
            let result = try Run.run(command + [dir + "/nope"])
            #expect(result.status == 74)
            #expect(result.stderr.contains("nope"))
            #expect(!FileManager.default.fileExists(atPath: dir + "/nope"), "a reading command creates nothing")
        }
    }

    // MARK: verify

    @Test func verifyCleanCorruptedAndLocked() throws {
        try withTemporaryDirectory { dir in
            let records = events(50)
            #expect(try Run.run(["append", dir], stdin: stdinData(records)).status == 0)
            let clean = try Run.run(["verify", dir])
            #expect(clean.status == 0)
            #expect(clean.stdoutText == "clean: 50 records in 1 segments, no checkpoint\n")

            // Flip one byte inside record 20's event: a bad CRC at that record's offset.
            let segment = dir + "/00000000000000000000.jsonl"
            var bytes = try #require(fileContents(atPath: segment))
            let lineStarts = [0] + bytes.indices.filter { bytes[$0] == 0x0A }.map { $0 + 1 }
            let offset = lineStarts[20]
            let target = offset + 60
            bytes[target] = bytes[target] == UInt8(ascii: "1") ? UInt8(ascii: "2") : UInt8(ascii: "1")
            try bytes.write(to: URL(fileURLWithPath: segment))

            let corrupted = try Run.run(["verify", dir])
            #expect(corrupted.status == 1)
            #expect(corrupted.stdoutText.contains("00000000000000000000.jsonl at byte \(offset): "), "\(corrupted.stdoutText)")
            #expect(corrupted.stdoutText.contains("1 problems"))
            // cat and drain pass over it, say so, and deliver the rest.
            let cat = try Run.run(["cat", dir])
            #expect(cat.status == 1)
            #expect(cat.stdoutLines == Array(records[..<20] + records[21...]))
            #expect(cat.stderr.contains("passed over 1 corrupt"))

            var config = BeaconLog.Configuration(directory: dir)
            config.access = .write
            let writer = try BeaconLog(configuration: config)
            defer { try? writer.close() }
            let locked = try Run.run(["verify", dir])
            #expect(locked.status == 1)
            #expect(locked.stdoutText.contains("a writer (pid \(getpid())) is appending"))
        }
    }

    @Test func verifyReportsATornTail() throws {
        try withTemporaryDirectory { dir in
            #expect(try Run.run(["append", dir], stdin: stdinData(events(5))).status == 0)
            let segment = dir + "/00000000000000000000.jsonl"
            let size = try #require(FileManager.default.attributesOfItem(atPath: segment)[.size] as? Int)
            let handle = try #require(FileHandle(forWritingAtPath: segment))
            try handle.seekToEnd()
            try handle.write(contentsOf: Data(#"{"seq":5,"crc":1,"ev"#.utf8))
            try handle.close()
            let result = try Run.run(["verify", dir])
            #expect(result.status == 1)
            #expect(result.stdoutText.contains("at byte \(size): an incomplete record"))
        }
    }
}
