// HTTPResponseParser (the answer of a collector: broken, hostile, or a man in the middle on plain
// http) fed the same bytes in pieces cut at points the input chooses. Promises:
// - the outcome (the answer, the bytes used, or the error) does not depend on where the pieces
//   were cut;
// - an answer framed by Content-Length used exactly its head and that many body bytes, and an
//   answer framed by chunks used exactly what a strict chunk decoder reads, with the same body;
// - the body kept is at most the cap (the rest counted as dropped), the head at most its cap;
// - while the answer is incomplete, every byte given is used.
//
// Input: byte 0 picks the caps, byte 1 the number of cuts (0–7), then two bytes per cut; the rest
// is what the server sent.
@testable import Beacon
@testable import BeaconHTTP
import Foundation
import FuzzSupport

enum Outcome: Equatable {
    case answer(status: Int, headers: HTTPHeaders, body: [UInt8], dropped: Int, used: Int, keepsAlive: Bool)
    case error(String)
}

func parse(_ data: [UInt8], cuts: [Int], maxBody: Int, maxHead: Int) -> Outcome {
    var parser = HTTPResponseParser(maxBodyBytes: maxBody, maxHeadBytes: maxHead)
    var used = 0
    var start = 0
    do {
        for end in cuts + [data.count] where end >= start {
            let piece = Array(data[start..<end])
            let n = try piece.withUnsafeBytes { try parser.consume($0) }
            used += n
            if parser.isComplete { break }
            promise(n == piece.count, "an incomplete answer used \(n) of the \(piece.count) bytes given")
            start = end
        }
        if !parser.isComplete {
            let closes = parser.readsUntilClose
            try parser.finish()
            promise(closes, "finish() completed an answer that does not read until the close")
        }
    } catch {
        return .error("\(error)")
    }
    let dropped = parser.droppedBodyBytes
    let keepsAlive = parser.keepsAlive
    let response = parser.takeResponse()
    promise(response.body.count <= maxBody, "kept \(response.body.count) body bytes over the cap of \(maxBody)")
    promise(dropped == 0 || response.body.count == maxBody, "dropped \(dropped) bytes while the body (\(response.body.count)) is under the cap \(maxBody)")
    return .answer(status: response.status, headers: response.headers, body: response.body, dropped: dropped, used: used, keepsAlive: keepsAlive)
}

FuzzMain.run { bytes in
    var input = FuzzInput(bytes)
    let caps = input.byte()
    let maxBody = [0, 1, 16, 1 << 20][Int(caps & 3)]
    let maxHead = [24, 100, 1024, 64 << 10][Int(caps >> 2 & 3)]
    let cutCount = Int(input.byte() & 7)
    var raw: [Int] = []
    for _ in 0..<cutCount { raw.append(Int(input.byte()) << 8 | Int(input.byte())) }
    let data = input.rest()
    let cuts = raw.map { $0 % (data.count + 1) }.sorted()

    let whole = parse(data, cuts: [], maxBody: maxBody, maxHead: maxHead)
    let split = parse(data, cuts: cuts, maxBody: maxBody, maxHead: maxHead)
    promise(whole == split, "the outcome depends on the cuts \(cuts): whole \(whole), split \(split)")
    let byteByByte = data.count <= 512 ? parse(data, cuts: Array(0...data.count), maxBody: maxBody, maxHead: maxHead) : whole
    promise(whole == byteByByte, "the outcome differs byte by byte: whole \(whole), byte by byte \(byteByByte)")

    guard case .answer(let status, let headers, let body, let dropped, let used, _) = whole else { return }
    promise(used <= data.count, "used \(used) of \(data.count) bytes")
    // The final head: after any interim 1xx answers, which were read the same way.
    guard let head = finalHead(data) else {
        promise(false, "an answer completed without a blank line ending a head")
        return
    }
    promise(head.status == status, "the status \(status) is not the final head's \(head.status)")
    promise(head.end - head.start <= maxHead, "a head of \(head.end - head.start) bytes passed the cap \(maxHead)")
    let names = Dictionary(headers.map { ($0.name.lowercased(), $0.value) }, uniquingKeysWith: { a, _ in a })
    if status == 204 || status == 304 {
        promise(used == head.end && body.isEmpty, "a \(status) answer used a body")
        return
    }
    let total = body.count + dropped
    if let encoding = names["transfer-encoding"], !encoding.isEmpty, encoding.lowercased() != "identity" {
        guard let (decoded, end) = dechunk(data, from: head.end) else {
            promise(false, "the parser read a chunked body a strict decoder refuses: \(data[head.end...].prefix(200).map { $0 })")
            return
        }
        promise(used == end, "a chunked answer used \(used) bytes, its chunks end at \(end)")
        promise(total == decoded.count && Array(decoded.prefix(maxBody)) == body, "the chunked body differs from its chunks")
    } else if let length = names["content-length"] {
        let values = Set(length.split(separator: ",").map { $0.trimmingCharacters(in: [" ", "\t"]) })
        guard values.count == 1, let text = values.first, !text.isEmpty, text.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let n = Int(text) else {
            promise(false, "the parser took the Content-Length '\(length)'")
            return
        }
        promise(used == head.end + n, "Content-Length \(n) after a head of \(head.end) bytes, but \(used) bytes used")
        promise(total == n && Array(data[head.end..<(head.end + min(n, maxBody))]) == body, "the body differs from the bytes after the head")
    } else {
        promise(used == data.count && total == data.count - head.end, "an answer read until the close used \(used) of \(data.count)")
    }
}

/// The final (non-1xx) head's status, start (after blank lines) and end (after its blank line).
func finalHead(_ data: [UInt8]) -> (status: Int, start: Int, end: Int)? {
    var i = 0
    while true {
        let start = i
        // Blank lines before a status line are passed over, and count towards the head.
        var lineStart = i
        var firstLine: [UInt8]?
        while let nl = data[i...].firstIndex(of: 0x0A) {
            var line = Array(data[lineStart..<nl])
            if line.last == 0x0D { line.removeLast() }
            i = nl + 1
            lineStart = i
            if firstLine == nil {
                if line.isEmpty { continue }
                firstLine = line
            } else if line.isEmpty {
                break
            }
        }
        guard let first = firstLine, first.count >= 12, data[i - 1] == 0x0A else { return nil }
        let status = first[9..<12].reduce(0) { $0 * 10 + Int($1) - 0x30 }
        if (100..<200).contains(status) { continue }
        return (status, start, i)
    }
}

/// A strict chunked decoder: hex digits only (extensions after `;`), CR LF or LF line ends.
func dechunk(_ data: [UInt8], from start: Int) -> ([UInt8], Int)? {
    var i = start
    var body: [UInt8] = []
    func line() -> [UInt8]? {
        guard let nl = data[i...].firstIndex(of: 0x0A) else { return nil }
        var l = Array(data[i..<nl])
        if l.last == 0x0D { l.removeLast() }
        i = nl + 1
        return l
    }
    while true {
        guard var size = line() else { return nil }
        if let semi = size.firstIndex(of: UInt8(ascii: ";")) { size = Array(size[..<semi]) }
        while size.last == 0x20 || size.last == 0x09 { size.removeLast() }
        while size.first == 0x20 || size.first == 0x09 { size.removeFirst() }
        guard !size.isEmpty, size.count <= 15, size.allSatisfy({ ($0 >= 0x30 && $0 <= 0x39) || ($0 | 0x20 >= 0x61 && $0 | 0x20 <= 0x66) }),
              let n = Int(String(decoding: size, as: UTF8.self), radix: 16) else { return nil }
        if n == 0 {
            while let trailer = line() { if trailer.isEmpty { return (body, i) } }
            return nil
        }
        guard data.count - i >= n else { return nil }
        body += data[i..<(i + n)]
        i += n
        guard let end = line(), end.isEmpty else { return nil }
    }
}
