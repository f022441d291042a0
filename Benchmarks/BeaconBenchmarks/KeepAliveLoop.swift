import Beacon
import BeaconHTTP
import Foundation
import Glibc

/// The upload phase's reference: the physical limit of its shape. One keep-alive connection on a
/// raw socket, one request in flight, the same prebuilt bodies, minimal headers; it writes a
/// request with one `writev` and reads the answer's head and `Content-Length` bytes, nothing more.
/// What any HTTP client adds per request (Beacon's included) is the difference to this loop.
enum KeepAliveLoop {
    /// The bodies for `events` cut into requests of `batch` events (JSON arrays), gzipped when asked.
    static func bodies(_ events: [[UInt8]], batch: Int, gzip: Bool) -> [[UInt8]] {
        stride(from: 0, to: events.count, by: batch).map { start in
            var body: [UInt8] = [UInt8(ascii: "[")]
            for i in start..<min(events.count, start + batch) {
                if i > start { body.append(UInt8(ascii: ",")) }
                body += events[i]
            }
            body.append(UInt8(ascii: "]"))
            return gzip ? Gzip.compress(body) : body
        }
    }

    /// POSTs `bodies` to 127.0.0.1:`port` one after the other on one connection; returns the
    /// seconds taken. Throws on anything but a 2xx answer with a `Content-Length`.
    static func run(_ bodies: [[UInt8]], port: UInt16, path: String = "/events", gzip: Bool) throws -> Double {
        let fd = try connect(port: port)
        defer { close(fd) }
        let prefix = "POST \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nContent-Type: application/json\r\n" + (gzip ? "Content-Encoding: gzip\r\n" : "") + "Content-Length: "
        var answer = [UInt8](repeating: 0, count: 16_384)
        return try time {
            for body in bodies {
                let head = Array((prefix + "\(body.count)\r\n\r\n").utf8)
                try head.withUnsafeBytes { h in
                    try body.withUnsafeBytes { b in try writeAll(fd, h, b) }
                }
                try readAnswer(fd, &answer, port: port)
            }
        }
    }

    /// A TCP connection to 127.0.0.1:`port` with `TCP_NODELAY`; the caller closes it.
    static func connect(port: UInt16) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw BenchFailure("keep-alive loop: socket: \(String(cString: strerror(errno)))") }
        var address = BenchCollector.loopback(port)
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else {
            let reason = String(cString: strerror(errno))
            close(fd)
            throw BenchFailure("keep-alive loop: connect to 127.0.0.1:\(port): \(reason)")
        }
        var one: Int32 = 1
        setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
        return fd
    }

    /// Writes `head` then `body` with `writev`, resuming after short writes.
    static func writeAll(_ fd: Int32, _ head: UnsafeRawBufferPointer, _ body: UnsafeRawBufferPointer) throws {
        var done = 0
        let total = head.count + body.count
        while done < total {
            var vectors: [iovec] = []
            if done < head.count {
                vectors.append(iovec(iov_base: UnsafeMutableRawPointer(mutating: head.baseAddress! + done), iov_len: head.count - done))
                vectors.append(iovec(iov_base: UnsafeMutableRawPointer(mutating: body.baseAddress), iov_len: body.count))
            } else {
                vectors.append(iovec(iov_base: UnsafeMutableRawPointer(mutating: body.baseAddress! + (done - head.count)), iov_len: total - done))
            }
            let n = writev(fd, vectors, Int32(vectors.count))
            if n < 0 {
                if errno == EINTR { continue }
                throw BenchFailure("keep-alive loop: writev: \(String(cString: strerror(errno)))")
            }
            done += n
        }
    }

    /// Reads one answer: its head up to the blank line, then `Content-Length` bytes of body.
    static func readAnswer(_ fd: Int32, _ buffer: inout [UInt8], port: UInt16) throws {
        var have = 0
        var headEnd: Int?
        var need = Int.max
        while have < need {
            if have == buffer.count { buffer += [UInt8](repeating: 0, count: buffer.count) }
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress! + have, $0.count - have) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { throw BenchFailure("keep-alive loop: 127.0.0.1:\(port) closed the connection (\(n < 0 ? String(cString: strerror(errno)) : "end of stream"))") }
            have += n
            if headEnd == nil, let end = find(buffer, "\r\n\r\n", upTo: have) {
                headEnd = end + 4
                let head = String(decoding: buffer[0..<end], as: UTF8.self)
                guard head.hasPrefix("HTTP/1.1 2") else { throw BenchFailure("keep-alive loop: 127.0.0.1:\(port) answered \(head.prefix(40))") }
                guard let line = head.split(separator: "\r\n").first(where: { $0.lowercased().hasPrefix("content-length:") }),
                      let length = Int(line.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) else {
                    throw BenchFailure("keep-alive loop: the answer of 127.0.0.1:\(port) has no Content-Length")
                }
                need = end + 4 + length
            }
        }
        guard have == need else { throw BenchFailure("keep-alive loop: 127.0.0.1:\(port) sent more than one answer") }
    }

    static func find(_ bytes: [UInt8], _ text: String, upTo end: Int) -> Int? {
        let needle = Array(text.utf8)
        guard end >= needle.count else { return nil }
        for i in 0...(end - needle.count) where bytes[i] == needle[0] && Array(bytes[i..<i + needle.count]) == needle { return i }
        return nil
    }
}
