import BeaconHTTP
import Glibc

/// One client connection of the collector: a socket, or bytes in memory (`Tests/Fuzz/FuzzCollector`
/// serves any request bytes through ``LoopbackCollector/serve(_:)`` without a socket).
protocol CollectorConnection {
    /// Reads into `buffer`; the number of bytes read, 0 at the end of the stream or on an error.
    mutating func receive(into buffer: UnsafeMutableRawBufferPointer) -> Int
    /// Sends all of `bytes`; false if the connection failed.
    mutating func send(_ bytes: UnsafeRawBufferPointer) -> Bool
}

/// A client's bytes in memory as a connection, for the tests and the fuzz targets: what the client
/// sent arrives in pieces cut at `cuts` (offsets into it, ascending), and what the collector sends
/// is kept in `output`.
final class MemoryConnection: CollectorConnection {
    let input: [UInt8]
    private var cuts: [Int]
    private var offset = 0
    private(set) var output: [UInt8] = []

    init(_ input: [UInt8], cuts: [Int] = []) {
        self.input = input
        self.cuts = cuts
    }

    func receive(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        while let cut = cuts.first, cut <= offset { cuts.removeFirst() }
        let end = min(input.count, cuts.first ?? input.count, offset + buffer.count)
        let n = end - offset
        if n > 0 { buffer.copyBytes(from: input[offset..<end]) }
        offset = end
        return n
    }

    func send(_ bytes: UnsafeRawBufferPointer) -> Bool {
        output.append(contentsOf: bytes)
        return true
    }
}

/// A connected socket, with blocking calls.
struct CollectorSocket: CollectorConnection {
    let fd: Int32

    mutating func receive(into buffer: UnsafeMutableRawBufferPointer) -> Int {
        while true {
            let n = recv(fd, buffer.baseAddress, buffer.count, 0)
            if n < 0 && errno == EINTR { continue }
            return max(0, n)
        }
    }

    mutating func send(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var done = 0
        while done < bytes.count {
            let n = Glibc.send(fd, bytes.baseAddress! + done, bytes.count - done, Int32(MSG_NOSIGNAL))
            if n < 0 && errno == EINTR { continue }
            if n <= 0 { return false }
            done += n
        }
        return true
    }
}

/// Buffered blocking reads of HTTP/1.1 requests from one connection.
struct SocketReader<Connection: CollectorConnection> {
    struct Head {
        var method: String
        var path: String
        var headers: HTTPHeaders
    }

    /// The longest request head, and the longest chunk size or trailer line: a client sending
    /// more without a line end is cut off instead of filling memory.
    static var maxHeadBytes: Int { 1 << 20 }
    static var maxLineBytes: Int { 64 << 10 }

    var connection: Connection
    var buffer: [UInt8] = []
    var start = 0

    init(_ connection: Connection) { self.connection = connection }

    /// Reads more bytes; false at end of stream or error.
    mutating func fill() -> Bool {
        if start > 0 && start == buffer.count { buffer.removeAll(keepingCapacity: true); start = 0 }
        var chunk = [UInt8](repeating: 0, count: 64 * 1024)
        let n = chunk.withUnsafeMutableBytes { connection.receive(into: $0) }
        if n <= 0 { return false }
        buffer.append(contentsOf: chunk[0..<n])
        return true
    }

    mutating func readHead() -> Head? {
        while true {
            if let end = find([0x0D, 0x0A, 0x0D, 0x0A]) {
                let text = String(decoding: buffer[start..<end], as: UTF8.self)
                start = end + 4
                var lines = text.components(separatedBy: "\r\n")
                let requestLine = lines.removeFirst().split(separator: " ")
                guard requestLine.count >= 2 else { return nil }
                var headers = HTTPHeaders()
                for line in lines {
                    guard let colon = line.firstIndex(of: ":") else { continue }
                    headers.add(name: String(line[..<colon]), value: line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces))
                }
                return Head(method: String(requestLine[0]), path: String(requestLine[1]), headers: headers)
            }
            if buffer.count - start > Self.maxHeadBytes { return nil }
            guard fill() else { return nil }
        }
    }

    func find(_ pattern: [UInt8]) -> Int? {
        guard buffer.count - start >= pattern.count else { return nil }
        return ByteSearch.firstIndex(of: pattern, in: buffer[start...])
    }

    mutating func read(count: Int) -> [UInt8]? {
        while buffer.count - start < count {
            guard fill() else { return nil }
        }
        let bytes = Array(buffer[start..<(start + count)])
        start += count
        return bytes
    }

    mutating func readLine() -> String? {
        while true {
            if let end = find([0x0D, 0x0A]) {
                let line = String(decoding: buffer[start..<end], as: UTF8.self)
                start = end + 2
                return line
            }
            if buffer.count - start > Self.maxLineBytes { return nil }
            guard fill() else { return nil }
        }
    }

    mutating func readChunked() -> [UInt8]? {
        var body: [UInt8] = []
        while true {
            guard let line = readLine() else { return nil }
            let sizeText = line.split(separator: ";").first.map(String.init)?.trimmingCharacters(in: .whitespaces) ?? ""
            guard let size = Int(sizeText, radix: 16), size >= 0 else { return nil }
            if size == 0 {
                // Trailers until an empty line.
                while let trailer = readLine(), !trailer.isEmpty {}
                return body
            }
            guard let chunk = read(count: size), readLine() != nil else { return nil }
            body.append(contentsOf: chunk)
        }
    }

    mutating func send(_ bytes: [UInt8]) -> Bool {
        bytes.withUnsafeBytes { connection.send($0) }
    }
}
