@testable import BeaconHTTP
import Testing
@testable import Beacon
@testable import BeaconHTTPServer

/// The collector's gzip request bodies (`beacon collect`, BeaconTesting): decoded exactly, and a
/// body that inflates past `maxDecodedBodyBytes` (a zip bomb) is answered 413 without holding
/// more than the limit (Tests/Fuzz/Sources/FuzzGzip fuzzes the same path).
@Suite("The collector's gzip bodies: decoded exactly, bounded, refused clearly")
struct CollectorGzipTests {
    /// A POST of `body` with `Content-Encoding: gzip`.
    static func post(_ body: [UInt8], chunked: Bool = false) -> [UInt8] {
        var head = "POST /events HTTP/1.1\r\nHost: x\r\nContent-Encoding: gzip\r\nConnection: close\r\n"
        if chunked {
            head += "Transfer-Encoding: chunked\r\n\r\n"
            let size = String(body.count, radix: 16)
            return Array(head.utf8) + Array("\(size)\r\n".utf8) + body + Array("\r\n0\r\n\r\n".utf8)
        }
        head += "Content-Length: \(body.count)\r\n\r\n"
        return Array(head.utf8) + body
    }

    /// `bytes` gzipped in `members` members of about the same size.
    static func gzip(_ bytes: [UInt8], members: Int) -> [UInt8] {
        let size = bytes.count / members
        var body: [UInt8] = []
        for i in 0..<members {
            let end = i == members - 1 ? bytes.count : (i + 1) * size
            body += Gzip.compress(Array(bytes[(i * size)..<end]))
        }
        return body
    }

    /// Serves `request` and returns the status and body of the answer, and what was recorded.
    static func serve(_ request: [UInt8], limit: Int) throws -> (status: Int, body: String, recorded: LoopbackCollector.Request) {
        let collector = try LoopbackCollector()
        defer { collector.stop() }
        collector.maxDecodedBodyBytes = limit
        let connection = MemoryConnection(request)
        collector.serve(connection)
        var parser = HTTPResponseParser()
        _ = try connection.output.withUnsafeBytes { try parser.consume($0) }
        let answer = parser.takeResponse()
        let recorded = try #require(collector.requests.first)
        return (answer.status, String(decoding: answer.body, as: UTF8.self), recorded)
    }

    @Test("a body inflating to exactly the limit is accepted; one byte more, in one member or spread over several, is refused as exceeding it")
    func theLimitIsExact() throws {
        for limit in [1, 100, 65_536, 65_537, 200_000] {
            let exact = (0..<limit).map { UInt8(truncatingIfNeeded: $0 % 7 + 97) }
            #expect(try Gzip.decompress(Gzip.compress(exact), limit: limit) == exact, "limit \(limit)")
            let over = exact + [0x61]
            for members in [1, 3] {
                let body = Self.gzip(over, members: members)
                #expect(try Gzip.decompress(body) == over)
                let error = #expect(throws: GzipError.self) { try Gzip.decompress(body, limit: limit) }
                #expect(error?.exceedsLimit == true, "limit \(limit), \(members) members: \(String(describing: error))")
            }
        }
        let damaged = #expect(throws: GzipError.self) { try Gzip.decompress(Array(Gzip.compress(Array(repeating: 1, count: 1000)).dropLast(3))) }
        #expect(damaged?.exceedsLimit == false)
    }

    @Test("a zip bomb (16 MiB of zeros in 16 KiB) is answered 413 naming the limit; damage is answered 400; both recorded with their raw bodies")
    func aZipBombIsAnswered413() throws {
        let bomb = Gzip.compress(Array(repeating: 0, count: 16 << 20), level: 9)
        #expect(bomb.count < 20_000)
        for chunked in [false, true] {
            let (status, body, recorded) = try Self.serve(Self.post(bomb, chunked: chunked), limit: 1 << 20)
            #expect(status == 413, "\(body)")
            #expect(body.contains("inflates to more than 1048576 bytes"), "\(body)")
            #expect(recorded.rawBody == bomb && recorded.body.count <= 1 << 20 && recorded.status == 413)
        }
        let truncated = Array(Gzip.compress(Array("{\"a\":1}\n".utf8)).dropLast(4))
        let (status, body, _) = try Self.serve(Self.post(truncated), limit: 1 << 20)
        #expect(status == 400 && body.contains("damaged or truncated"), "\(status) \(body)")
    }

    @Test("NDJSON in several concatenated gzip members, with Content-Length or chunked: every record decoded exactly, in order")
    func concatenatedMembersAreDecodedExactly() throws {
        let records: [[UInt8]] = (0..<50).map { Array(#"{"n":\#($0),"s":"\#(String(repeating: "x", count: $0))"}"#.utf8) }
        let plain: [UInt8] = records.flatMap { $0 + [0x0A] }
        let first: [UInt8] = Gzip.compress(Array(plain[..<700]))
        let second: [UInt8] = Gzip.compress(Array(plain[700..<701]), level: 0)
        let body = first + second + Gzip.compress(Array(plain[701...]))
        for chunked in [false, true] {
            let (status, answer, recorded) = try Self.serve(Self.post(body, chunked: chunked), limit: plain.count)
            #expect(status == 200, "\(answer)")
            #expect(recorded.body == plain && recorded.events == records)
        }
    }
}
