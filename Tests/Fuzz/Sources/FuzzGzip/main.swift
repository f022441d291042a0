// The collector's gzip request bodies (`Content-Encoding: gzip`, LoopbackCollector: `beacon
// collect` and BeaconTesting), through its socket-free entry point `serve(_:)`, under a small
// decompression limit (`maxDecodedBodyBytes`, 256 MiB in use; here 512 B to 64 KiB, so that bombs
// past it are cheap to make). Promises:
// - a valid body (NDJSON records the target writes, gzipped in 1-4 members, any level, with
//   Content-Length or chunked) inflating to at most the limit is answered 200 and its records are
//   decoded exactly, in order; past the limit (a zip bomb: a run of one byte, any size around the
//   limit) it is answered 413, naming the limit, and the collector holds no more than the limit;
// - a damaged body (truncated, a byte changed, bytes inserted or appended) or any bytes at all
//   gets the answer a reference inflate (zlib driven member by member here) implies: 200 with the
//   same bytes when it inflates cleanly within the limit, 413 when it produces more than the
//   limit, else 400 saying the body is damaged; always one well-formed answer.
//
// Input: byte 0: bits 0-1 the mode (0 valid, 1 damaged, 2 bomb, 3 raw), bit 2 chunked; byte 1:
// the limit (512 << (b & 7)); byte 2: members (1 + b & 3) and level (b >> 2 % 10); bytes 3-5: the
// damage (kind, where) or the bomb's size around the limit; the rest: the records' text (mode 3:
// the body).
@testable import Beacon
@testable import BeaconHTTP
@testable import BeaconHTTPServer
import CZlib
import FuzzSupport
import Glibc

/// What a reference inflate makes of `body`: every member in turn (gzip or zlib, as the collector
/// accepts), stopping at the first error or once more than `limit` bytes came out.
enum Reference: Equatable {
    case inflated([UInt8])
    case pastLimit
    case damaged
}

func reference(_ body: [UInt8], limit: Int) -> Reference {
    var stream = z_stream()
    guard inflateInit2_(&stream, 47, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size)) == Z_OK else { return .damaged }
    defer { inflateEnd(&stream) }
    var output: [UInt8] = []
    var buffer = [UInt8](repeating: 0, count: 4096)
    guard !body.isEmpty else { return .damaged }
    return body.withUnsafeBufferPointer { input -> Reference in
        stream.next_in = UnsafeMutablePointer(mutating: input.baseAddress)
        stream.avail_in = uInt(input.count)
        while true {
            let (status, produced) = buffer.withUnsafeMutableBufferPointer { out -> (Int32, Int) in
                stream.next_out = out.baseAddress
                stream.avail_out = uInt(out.count)
                let status = inflate(&stream, Z_NO_FLUSH)
                return (status, out.count - Int(stream.avail_out))
            }
            output += buffer[0..<produced]
            if output.count > limit { return .pastLimit }
            switch status {
            case Z_STREAM_END:
                if stream.avail_in == 0 { return .inflated(output) }
                guard inflateReset(&stream) == Z_OK else { return .damaged }
            case Z_OK:
                continue
            case Z_BUF_ERROR where produced > 0:
                continue
            default:
                return .damaged
            }
        }
    }
}

/// `body` gzipped in `members` members (split evenly) at `level`.
func gzip(_ body: [UInt8], members: Int, level: Int32) -> [UInt8] {
    guard members > 1, body.count >= members else { return Gzip.compress(body, level: level) }
    let size = body.count / members
    return (0..<members).flatMap { i in
        Gzip.compress(Array(body[(i * size)..<(i == members - 1 ? body.count : (i + 1) * size)]), level: level)
    }
}

func post(_ body: [UInt8], chunked: Bool) -> [UInt8] {
    var head = "POST /events HTTP/1.1\r\nHost: fuzz\r\nContent-Encoding: gzip\r\nConnection: close\r\n"
    guard chunked else { return Array((head + "Content-Length: \(body.count)\r\n\r\n").utf8) + body }
    head += "Transfer-Encoding: chunked\r\n\r\n"
    var out = Array(head.utf8)
    var i = 0
    while i < body.count {
        let n = min(700, body.count - i)
        out += Array("\(String(n, radix: 16))\r\n".utf8) + body[i..<(i + n)] + Array("\r\n".utf8)
        i += n
    }
    return out + Array("0\r\n\r\n".utf8)
}

let collector = try! LoopbackCollector()

/// A gzip member of `mebibytes` MiB of zeros, made in pieces (about 1 KB per MiB): the bomb's
/// plain bytes are never held.
func zeroBomb(mebibytes: Int) -> [UInt8] {
    var stream = z_stream()
    precondition(deflateInit2_(&stream, 9, Z_DEFLATED, 31, 9, Z_DEFAULT_STRATEGY, ZLIB_VERSION, Int32(MemoryLayout<z_stream>.size)) == Z_OK)
    defer { deflateEnd(&stream) }
    let zeros = [UInt8](repeating: 0, count: 1 << 20)
    var out = [UInt8](repeating: 0, count: 1 << 16)
    var bomb: [UInt8] = []
    for i in 0..<mebibytes {
        zeros.withUnsafeBufferPointer { input in
            stream.next_in = UnsafeMutablePointer(mutating: input.baseAddress)
            stream.avail_in = uInt(input.count)
            repeat {
                let produced = out.withUnsafeMutableBufferPointer { o -> Int in
                    stream.next_out = o.baseAddress
                    stream.avail_out = uInt(o.count)
                    _ = deflate(&stream, i == mebibytes - 1 ? Z_FINISH : Z_NO_FLUSH)
                    return o.count - Int(stream.avail_out)
                }
                bomb += out[0..<produced]
            } while stream.avail_in > 0 || stream.avail_out == 0
        }
    }
    return bomb
}

/// The default limit holds: a 257 MiB bomb (about 260 KB) is answered 413, and the process grows
/// by what holding the limit costs, not by what the body inflates to. Once, at start.
func checkTheDefaultLimit() {
    let bomb = zeroBomb(mebibytes: 257)
    let request = post(bomb, chunked: false)
    var usage = rusage()
    getrusage(RUSAGE_SELF.rawValue, &usage)
    let before = usage.ru_maxrss
    let connection = MemoryConnection(request)
    collector.serve(connection)
    getrusage(RUSAGE_SELF.rawValue, &usage)
    let grewMiB = (usage.ru_maxrss - before) / 1024
    let answer = String(decoding: connection.output, as: UTF8.self)
    promise(answer.hasPrefix("HTTP/1.1 413 ") && answer.contains("more than \(256 << 20) bytes"), "a 257 MiB bomb under the default limit: \(answer.prefix(300))")
    // The 256 MiB held, plus the buffers it outgrew on the way (128 + 64 + ... MiB), which
    // AddressSanitizer's quarantine keeps resident: 512 MiB. Doubling past the limit (a 512 MiB
    // buffer, its 256 MiB predecessor and theirs) would pass 1 GiB.
    promise(grewMiB < 640, "the process grew by \(grewMiB) MiB for a 257 MiB bomb under a 256 MiB limit")
    print("FuzzGzip: a 257 MiB bomb (\(bomb.count) bytes) under the default 256 MiB limit: 413, the process grew by \(grewMiB) MiB")
    collector.state.withLock { $0.requests = [] }
}
checkTheDefaultLimit()

FuzzMain.run { bytes in
    var input = FuzzInput(bytes)
    let options = input.byte()
    let mode = options & 3
    let chunked = options & 4 != 0
    let limit = 512 << Int(input.byte() & 7)
    let shape = input.byte()
    let members = 1 + Int(shape & 3)
    let level = Int32(shape >> 2) % 10
    let a = input.byte(), b = input.byte(), c = input.byte()
    let text = input.rest()

    // The records: one NDJSON line per line of the text, its bytes kept within a JSON string.
    let records: [[UInt8]] = text.split(separator: 0x0A, omittingEmptySubsequences: false).enumerated().map { i, line in
        Array(#"{"n":\#(i),"s":""#.utf8) + line.map { $0 == 0x22 || $0 == 0x5C || $0 < 0x20 || $0 > 0x7E ? UInt8(ascii: "_") : $0 } + Array(#""}"#.utf8)
    }
    let plain: [UInt8] = records.flatMap { $0 + [0x0A] }
    var body: [UInt8]
    var expected: Reference?
    switch mode {
    case 0:
        body = gzip(plain, members: members, level: level)
        expected = plain.count <= limit ? .inflated(plain) : .pastLimit
    case 1:
        body = gzip(plain, members: members, level: level)
        let at = (Int(b) << 8 | Int(c)) % (body.count + 1)
        switch a % 4 {
        case 0: body.removeSubrange(at...)
        case 1: if at < body.count { body[at] ^= max(1, a) }
        case 2: body.insert(contentsOf: [a, b, c], at: at)
        default: body += [a, b, c].prefix(1 + Int(c % 3))
        }
    case 2:
        // A run of one byte, from well below the limit to well past it.
        let size = max(0, limit + (Int(Int16(bitPattern: UInt16(a) << 8 | UInt16(b))) % (4 * limit)))
        let run = [UInt8](repeating: c, count: size)
        body = gzip(run, members: members, level: level)
        expected = size <= limit ? .inflated(run) : .pastLimit
    default:
        body = text
    }
    let want = reference(body, limit: limit)
    if let expected { promise(want == expected, "the reference inflate disagrees with the body the target made (mode \(mode))") }

    collector.state.withLock { s in
        s.requests = []
        s.maxDecodedBodyBytes = limit
    }
    let connection = MemoryConnection(post(body, chunked: chunked))
    collector.serve(connection)
    let requests = collector.state.withLock { $0.requests }
    promise(requests.count == 1, "\(requests.count) requests recorded for one")
    let request = requests[0]
    var parser = HTTPResponseParser()
    let output = connection.output
    var used = 0
    do { used = try output.withUnsafeBytes { try parser.consume($0) } } catch {
        promise(false, "a malformed answer: \(String(decoding: output.prefix(300), as: UTF8.self))")
    }
    promise(parser.isComplete && used == output.count, "not one whole answer: \(String(decoding: output.prefix(300), as: UTF8.self))")
    let answer = parser.takeResponse()
    let message = String(decoding: answer.body, as: UTF8.self)
    promise(request.status == answer.status, "recorded \(String(describing: request.status)), answered \(answer.status)")
    switch want {
    case .inflated(let bytes):
        promise(answer.status == 200, "a body the reference inflates to \(bytes.count) bytes (limit \(limit)) answered \(answer.status): \(message)")
        promise(request.body == bytes, "the collector's body differs from the reference's (\(request.body.count) and \(bytes.count) bytes)")
        if mode != 3 || expected != nil { promise(request.events ?? [] == BatchSplitter.events(in: bytes) ?? [], "events differ") }
        if expected != nil, mode == 0 { promise(request.events ?? [] == records, "the records were not decoded exactly: \(request.events?.count ?? -1) for \(records.count)") }
    case .pastLimit:
        promise(answer.status == 413 && message.contains("more than \(limit) bytes"), "a body inflating past the limit \(limit) answered \(answer.status): \(message)")
        promise(request.body == request.rawBody, "a refused body kept what it inflated to")
    case .damaged:
        promise(answer.status == 400 && message.contains("gzip"), "a damaged body answered \(answer.status): \(message)")
    }
}
