@testable import BeaconHTTP
import Foundation
import Synchronization
import Testing
@testable import Beacon
import BeaconTestSupport

/// HTTP/1.1 pipelining: the answers to requests written back to back are read in order from
/// whatever the connection's reads deliver (`PipelinedAnswers`), and a collector that ends the
/// connection with requests unanswered is told apart (`SocketConnection+Pipelining`).
@Suite("Pipelining: answers split anywhere, servers closing after k of n answers")
struct PipeliningTests {
    static let answers: [String] = [
        "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
        "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\n\r\n",
        "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        "HTTP/1.1 413 Payload Too Large\r\nContent-Length: 5\r\n\r\nlarge",
    ]
    static let expected: [(Int, String)] = [(200, "ok"), (503, ""), (200, "abc"), (413, "large")]

    /// Feeds `chunks` in turn and takes every answer they complete.
    static func read(_ chunks: [ArraySlice<UInt8>]) throws -> [PipelinedAnswers.Answer] {
        var reader = PipelinedAnswers(maxBodyBytes: 1 << 20)
        var out: [PipelinedAnswers.Answer] = []
        for chunk in chunks {
            // As the connection does: the bytes kept first, then what the read brought.
            while let answer = try reader.next() { out.append(answer) }
            if let answer = try Array(chunk).withUnsafeBytes({ try reader.feed($0) }) { out.append(answer) }
        }
        while let answer = try reader.next() { out.append(answer) }
        return out
    }

    static func check(_ got: [PipelinedAnswers.Answer], _ context: String) {
        #expect(got.map { $0.response.status } == expected.map(\.0), "\(context)")
        #expect(got.map { String(decoding: $0.response.body, as: UTF8.self) } == expected.map(\.1), "\(context)")
        #expect(got.allSatisfy { $0.keepsAlive }, "\(context)")
    }

    @Test("four answers in one read, in two reads split at every byte, in three split at every pair of bytes: the same answers, in order")
    func everySplitPoint() throws {
        let bytes = Array(Self.answers.joined().utf8)
        Self.check(try Self.read([bytes[...]]), "one read")
        for i in 0...bytes.count {
            Self.check(try Self.read([bytes[..<i], bytes[i...]]), "split at \(i)")
        }
        for i in stride(from: 0, through: bytes.count, by: 3) {
            for j in i...bytes.count {
                Self.check(try Self.read([bytes[..<i], bytes[i..<j], bytes[j...]]), "split at \(i), \(j)")
            }
        }
        Self.check(try Self.read(bytes.map { [$0][...] }), "a byte a read")
    }

    @Test("an answer that ends the connection (Connection: close, HTTP/1.0) says so; one delimited by the close ends at it; a cut one fails")
    func answersThatEndTheConnection() throws {
        let close = try Self.read([Array("HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n".utf8)[...]])
        #expect(close.count == 1 && close[0].keepsAlive == false)
        let old = try Self.read([Array("HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n".utf8)[...]])
        #expect(old.count == 1 && old[0].keepsAlive == false)
        var reader = PipelinedAnswers(maxBodyBytes: 1 << 20)
        #expect(try Array("HTTP/1.1 200 OK\r\n\r\nuntil the end".utf8).withUnsafeBytes { try reader.feed($0) } == nil)
        let ended = try reader.closed()
        #expect(ended?.response.status == 200 && ended?.response.body == Array("until the end".utf8) && ended?.keepsAlive == false)
        var nothing = PipelinedAnswers(maxBodyBytes: 1 << 20)
        #expect(try nothing.closed() == nil, "no byte of an answer: no answer")
        var cut = PipelinedAnswers(maxBodyBytes: 1 << 20)
        #expect(try Array("HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\nabc".utf8).withUnsafeBytes { try cut.feed($0) } == nil)
        #expect(throws: HTTPResponseParser.Malformed.self) { try cut.closed() }
    }

    func request(_ url: URL, _ n: Int) -> TransportRequest {
        TransportRequest(url: url, headers: [("X-N", String(n))], body: Array("[\(n)]".utf8), timeout: .seconds(60))
    }

    @Test("n requests written back to back, answered in one write: n answers in order on one connection", arguments: 1...8)
    func pipelinedOnOneConnection(n: Int) async throws {
        let server = try ScriptedServer { connection, _ in
            var numbers: [String] = []
            for _ in 0..<n {
                guard let (head, _) = connection.readRequest() else { return }
                numbers.append(head.split(separator: "\r\n").first { $0.hasPrefix("X-N: ") }.map { String($0.dropFirst(5)) } ?? "?")
            }
            connection.write(numbers.map { "HTTP/1.1 200 OK\r\nContent-Length: \($0.utf8.count)\r\n\r\n\($0)" }.joined())
            connection.waitForClose()
        }
        defer { server.stop() }
        let transport = SocketTransport()
        defer { transport.close() }
        for i in 0..<n { try await transport.writePipelined(request(server.url, i)) }
        for i in 0..<n {
            let (response, keepsAlive) = try await transport.readPipelined(timeout: .seconds(60))
            #expect(response.status == 200 && String(decoding: response.body, as: UTF8.self) == String(i) && keepsAlive)
        }
        #expect(server.accepted == 1 && transport.connectionsOpened == 1)
    }

    @Test("a server closing after k of n answers, for every k: k answers in order, then a network error for the rest; a Connection: close answer says it ends the connection", arguments: 0...4)
    func closesAfterK(k: Int) async throws {
        let n = 5
        for sayClose in [false, true] {
            let server = try ScriptedServer { connection, _ in
                for _ in 0..<n { guard connection.readRequest() != nil else { return } }
                for i in 0..<k {
                    connection.write("HTTP/1.1 200 OK\r\n\(sayClose && i == k - 1 ? "Connection: close\r\n" : "")Content-Length: 1\r\n\r\n\(i)")
                }
                connection.close()
            }
            defer { server.stop() }
            let transport = SocketTransport()
            defer { transport.close() }
            for i in 0..<n { try await transport.writePipelined(request(server.url, i)) }
            for i in 0..<k {
                let (response, keepsAlive) = try await transport.readPipelined(timeout: .seconds(60))
                #expect(response.body == Array(String(i).utf8))
                #expect(keepsAlive == !(sayClose && i == k - 1))
            }
            await #expect(throws: TransportError.self) { _ = try await transport.readPipelined(timeout: .seconds(10)) }
        }
    }
}
