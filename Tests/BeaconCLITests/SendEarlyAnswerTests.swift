import Foundation
import Testing
import BeaconTestTraits

/// `beacon send` against a collector that answers from the request's head alone and closes
/// without reading the body (RFC 9112 §9.5 allows it): the answer already in the socket is acted on.
@Suite("beacon send: an answer before the body is read", .serialized, .timeLimit(.minutes(1)), .blocking)
struct SendEarlyAnswerTests {
    @Test("a 3 MiB event among small ones, a collector answering 413 from the head and closing: the event is set aside, the others delivered, even with --retries 1")
    func tooLargeFromTheHead() throws {
        try withTemporaryDirectory { dir in
            let big = #"{"event":"Big","pad":""# + String(repeating: "x", count: 3 << 20) + #""}"#
            let small = events(20)
            #expect(try BeaconToolRunner.run(["append", dir, "--max-bytes", String(4 << 20)], stdin: stdinData(Array(small[..<10]) + [big] + Array(small[10...]))).status == 0)
            let server = try ScriptedServer { connection, _ in
                while let head = connection.readHead() {
                    let length = head.split(separator: "\r\n").first { $0.lowercased().hasPrefix("content-length:") }
                        .flatMap { Int($0.split(separator: ":")[1].trimmingCharacters(in: .whitespaces)) } ?? 0
                    guard length <= 1 << 20 else {
                        // From the head alone; closing with the body unread resets the connection.
                        connection.answer(413, "at most 1 MiB", headers: "Connection: close\r\n")
                        return
                    }
                    _ = connection.readBytes(length)
                    connection.answer(200)
                }
            }
            defer { server.stop() }
            let result = try BeaconToolRunner.run(["send", dir, "--url", "http://127.0.0.1:\(server.port)/events", "--retries", "1"])
            #expect(result.status == 0, "\(result.stderr)")
            #expect(result.stderr.contains("sent 20 events") && result.stderr.contains("1 set aside"), "\(result.stderr)")
            #expect(try statusJSON(dir)["pending_records"] as? Int == 0)
            let rejected = (try? String(contentsOfFile: dir + "/rejected.jsonl", encoding: .utf8)) ?? ""
            #expect(rejected.contains("413"), "\(rejected.prefix(300))")
        }
    }
}
