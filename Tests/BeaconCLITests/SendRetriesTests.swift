import BeaconTesting
import Foundation
import Testing
import BeaconTestTraits

@Suite("beacon send: retries without progress, catch-up batches, the collector's explanation", .blocking)
struct SendRetriesTests {
    @Test("--retries 5 counts failures in a row without progress: with every tenth answer 500, everything is delivered")
    func retriesInARow() throws {
        try withTemporaryDirectory { dir in
            #expect(try BeaconToolRunner.run(["append", dir], stdin: stdinData(events(1000))).status == 0)
            let collector = try LoopbackCollector()
            defer { collector.stop() }
            for i in 0..<200 { collector.enqueue(i % 10 == 9 ? .status(500, body: "Code: 159. Timeout exceeded") : .status(200)) }
            let result = try BeaconToolRunner.run(["send", dir, "--url", collector.url.absoluteString, "--batch", "10", "--catch-up-batch", "10", "--retries", "5"])
            #expect(result.status == 0, "\(result.stderr)")
            #expect(collector.requests.filter { $0.status == 500 }.count >= 10, "more failures in total than --retries")
            // Every event once; a batch answered 500 may arrive after the requests pipelined
            // behind it (at most the window less one), so the order is the window's.
            let accepted = collector.acceptedEvents.map { String(decoding: $0, as: UTF8.self) }
            #expect(accepted.count == 1000 && Set(accepted) == Set(events(1000)))
        }
    }

    @Test("a collector that keeps answering 500 makes send exit 74, quoting its explanation")
    func quotesTheCollector() throws {
        try withTemporaryDirectory { dir in
            #expect(try BeaconToolRunner.run(["append", dir], stdin: stdinData(events(3))).status == 0)
            let collector = try LoopbackCollector()
            defer { collector.stop() }
            collector.defaultReply = .status(500, body: "Code: 60. DB::Exception: Table default.events doesn't exist. (UNKNOWN_TABLE)")
            let result = try BeaconToolRunner.run(["send", dir, "--url", collector.url.absoluteString, "--retries", "1"])
            #expect(result.status == 74)
            #expect(result.stderr.contains("Table default.events doesn't exist. (UNKNOWN_TABLE)"), "\(result.stderr)")
            #expect(result.stderr.contains("3 stay pending"), "\(result.stderr)")
        }
    }

    @Test("--catch-up-batch sends big requests while behind and the --batch size once caught up")
    func catchUpBatch() throws {
        try withTemporaryDirectory { dir in
            #expect(try BeaconToolRunner.run(["append", dir], stdin: stdinData(events(250))).status == 0)
            let collector = try LoopbackCollector()
            defer { collector.stop() }
            let url = collector.url.absoluteString
            #expect(try BeaconToolRunner.run(["send", dir, "--url", url, "--batch", "10", "--catch-up-batch", "100"]).status == 0)
            #expect(try BeaconToolRunner.run(["append", dir], stdin: stdinData(events(5, from: 250))).status == 0)
            #expect(try BeaconToolRunner.run(["send", dir, "--url", url, "--batch", "10", "--catch-up-batch", "100"]).status == 0)
            #expect(collector.requests.map { $0.events?.count ?? -1 } == [100, 100, 50, 5])
            #expect(collector.acceptedEvents.map { String(decoding: $0, as: UTF8.self) } == events(255))
            #expect(try BeaconToolRunner.run(["send", dir, "--url", url, "--catch-up-batch", "0"]).status == 64)
        }
    }
}
