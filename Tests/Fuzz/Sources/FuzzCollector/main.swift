// The collector `beacon collect` and BeaconTesting run (LoopbackCollector), serving any request
// bytes through its socket-free entry point `serve(_:)`, arriving in pieces the input cuts.
// Promises:
// - it ends: an answer or a close for whatever arrives (libFuzzer's -timeout for hangs);
// - what it sends is a sequence of well-formed HTTP/1.1 answers (read back with Beacon's own
//   answer parser), one per request it recorded as answered, and a request is recorded only
//   for a head it read;
// - memory stays bounded by the input (libFuzzer's -malloc_limit_mb and -rss_limit_mb catch an
//   allocation sized by a declared length).
//
// Input: byte 0: bit 0 sets a 64-byte body limit (413s), bit 1 a reject marker "bad" (400s),
// bits 2–4 the number of cuts (two bytes each); the rest is what the client sent.
@testable import Beacon
@testable import BeaconHTTP
@testable import BeaconHTTPServer
import FuzzSupport

let collector = try! LoopbackCollector()

FuzzMain.run { bytes in
    var input = FuzzInput(bytes)
    let options = input.byte()
    let cutCount = Int(options >> 2 & 7)
    var raw: [Int] = []
    for _ in 0..<cutCount { raw.append(Int(input.byte()) << 8 | Int(input.byte())) }
    let data = input.rest()
    collector.state.withLock { s in
        s.requests = []
        s.maxBodyBytes = options & 1 != 0 ? 64 : nil
        s.rejectMarker = options & 2 != 0 ? Array("bad".utf8) : nil
    }
    let connection = MemoryConnection(data, cuts: raw.map { $0 % (data.count + 1) }.sorted())
    collector.serve(connection)
    let requests = collector.state.withLock { $0.requests }

    let heads = data.indices.filter { $0 + 3 < data.count && data[$0] == 0x0D && data[$0 + 1] == 0x0A && data[$0 + 2] == 0x0D && data[$0 + 3] == 0x0A }.count
    promise(requests.count <= heads, "\(requests.count) requests recorded from \(heads) heads")
    for request in requests {
        promise(request.rawBody.count <= data.count, "a body of \(request.rawBody.count) bytes from \(data.count) bytes of input")
    }
    // The answers: well-formed, one per answered request, in order.
    var parser = HTTPResponseParser()
    var statuses: [Int] = []
    var rest = connection.output[...]
    while !rest.isEmpty {
        do {
            let used = try Array(rest).withUnsafeBytes { try parser.consume($0) }
            guard parser.isComplete else {
                // `100 Continue`, then the body never came: closed without a final answer.
                let interim = Array("HTTP/1.1 100 Continue\r\n\r\n".utf8)
                if rest.count % interim.count == 0, Array(rest) == Array((0..<rest.count / interim.count).map { _ in interim }.joined()) { break }
                promise(false, "an incomplete answer: \(String(decoding: connection.output, as: UTF8.self).prefix(300))")
                return
            }
            rest = rest.dropFirst(used)
            statuses.append(parser.takeResponse().status)
        } catch {
            promise(false, "a malformed answer (\(error)): \(String(decoding: connection.output, as: UTF8.self).prefix(300))")
            return
        }
    }
    let answered = requests.compactMap(\.status)
    promise(statuses == answered, "answers \(statuses) for requests answered \(answered)")
}
