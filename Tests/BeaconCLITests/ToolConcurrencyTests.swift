import BeaconTestSupport
import Foundation
import Glibc
import Testing
import BeaconTestTraits

/// The tool on a directory another process is writing to or draining at the same time.
@Suite(.blocking) struct ToolConcurrencyTests {
    typealias Run = BeaconToolRunner

    /// While `beacon append` runs (holding the writer lock), read-only commands see a consistent
    /// prefix and a drain in another process takes what is there.
    @Test func readersWorkWhileAnAppendIsRunning() throws {
        try withTemporaryDirectory { dir in
            let records = events(300)
            let writer = try RunningTool(["append", dir, "--sync", "each"])
            try writer.send(Array(records[..<100]))
            #expect(eventually { ((try? statusJSON(dir))?["pending_records"] as? Int) == 100 })

            let status = try statusJSON(dir)
            #expect(status["writer_pid"] as? Int == Int(writer.pid))
            #expect(status["reader_pid"] is NSNull)
            #expect(try Run.run(["cat", dir]).stdoutLines == Array(records[..<100]))
            let verify = try Run.run(["verify", dir])
            #expect(verify.status == 0)
            #expect(verify.stdoutText.contains("a writer (pid \(writer.pid)) is appending"))
            // A second writer is refused.
            #expect(try Run.run(["append", dir], stdin: stdinData(["{}"])).status == 75)

            // drain takes the reader lock, not the writer's: it runs beside the append.
            let first = try Run.run(["drain", dir, "--batch", "30"])
            #expect(first.status == 0, "\(first.stderr)")
            #expect(first.stdoutLines == Array(records[..<100]))

            try writer.send(Array(records[100...]))
            #expect(eventually { ((try? statusJSON(dir))?["next_seq"] as? Int) == 300 })
            let end = try writer.finish()
            #expect(end.status == 0, "\(end.stderr)")
            #expect(try Run.run(["drain", dir]).stdoutLines == Array(records[100...]))
            #expect(try statusJSON(dir)["pending_records"] as? Int == 0)
        }
    }

    /// Ctrl-C (or SIGTERM) while append waits for input: every complete line read so far is
    /// appended and durable, the incomplete one is dropped, exit 128 + signal.
    @Test(arguments: [SIGINT, SIGTERM])
    func anInterruptedAppendKeepsWhatItRead(_ number: Int32) throws {
        try withTemporaryDirectory { dir in
            let records = events(250)
            let writer = try RunningTool(["append", dir, "--sync", "none"])
            try writer.send(records)
            try writer.sendRaw(Data(#"{"incomplete":"#.utf8))
            // --sync none writes within 10 ms, so status (another process) sees all of them.
            #expect(eventually { ((try? statusJSON(dir))?["next_seq"] as? Int) == records.count })
            let end = writer.signal(number)
            #expect(end.status == 128 + number)
            #expect(end.stderr.contains("interrupted by signal \(number) after 250 lines"))
            #expect(try Run.run(["cat", dir]).stdoutLines == records)
            #expect(try Run.run(["verify", dir]).status == 0)
        }
    }

    /// kill -9 of a drain at any moment: a second drain completes the output; every record
    /// appears, in order, and only a suffix of the batch in flight can repeat (at least once).
    @Test(arguments: [0, 20, 60])
    func aKilledDrainDeliversEverythingAtLeastOnce(afterMilliseconds delay: Int) throws {
        try withTemporaryDirectory { dir in
            let records = events(30_000)
            #expect(try Run.run(["append", dir, "--sync", "none"], stdin: stdinData(records)).status == 0)
            let output = dir + "-out.jsonl"
            defer { try? FileManager.default.removeItem(atPath: output) }
            let batch = 500
            let drain = try RunningTool(["drain", dir, "--batch", "\(batch)"], stdoutFile: output)
            usleep(UInt32(delay * 1000))
            drain.kill()
            let second = try Run.run(["drain", dir, "--batch", "\(batch)"])
            #expect(second.status == 0)
            let firstLines = String(decoding: fileContents(atPath: output) ?? Data(), as: UTF8.self)
                .split(separator: "\n", omittingEmptySubsequences: false).map(String.init)
            // The first drain's output: whole records in order, maybe ending in a torn line.
            let complete = Array(firstLines.dropLast())  // after the last newline: empty or torn
            #expect(complete == Array(records[..<complete.count]))
            // The second drain starts at the checkpoint: a batch boundary at or before what was printed.
            let resumed = second.stdoutLines
            #expect(resumed.count <= records.count)
            let start = records.count - resumed.count
            #expect(resumed == Array(records[start...]))
            #expect(start <= complete.count, "nothing is lost")
            #expect(start % batch == 0, "acknowledged only at batch ends")
            #expect(complete.count - start <= batch, "at most the batch in flight repeats")
        }
    }
}
