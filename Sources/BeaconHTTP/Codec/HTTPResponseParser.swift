/// Reads one HTTP/1.1 answer from bytes as they arrive, in pieces of any size.
///
/// It takes the status line and header fields (names compared without case, repeated fields
/// joined with ", "), skips interim `1xx` answers, and reads the body by `Content-Length`, by
/// `Transfer-Encoding: chunked` or until the connection closes. At most `maxBodyBytes` of the body
/// are kept; the rest is read and dropped, so a collector answering gigabytes cannot fill memory.
/// The head of an answer may be at most `maxHeadBytes`, and so may each chunk size line and the
/// trailers.
///
/// ```swift
/// var parser = HTTPResponseParser()
/// let used = try parser.consume(bytes)          // call again with more bytes while !parser.isComplete
/// if parser.isComplete { let response = parser.takeResponse() }
/// ```
struct HTTPResponseParser {
    /// What is wrong with an answer.
    struct Malformed: Error, Equatable, CustomStringConvertible {
        var description: String
    }

    private enum Framing {
        case length(Int)
        case chunked
        case untilClose
    }

    private enum Phase {
        /// Reading the status line (`true` once any byte of it arrived).
        case statusLine
        case headers
        case body(remaining: Int)
        case chunkSize
        case chunkData(remaining: Int)
        case chunkDataEnd
        case trailers
        case untilClose
        case complete
    }

    let maxBodyBytes: Int
    let maxHeadBytes: Int

    private var phase = Phase.statusLine
    /// The line being read (status line, header field, chunk size or trailer).
    private var line: [UInt8] = []
    private var headBytes = 0
    private var status = 0
    private var minorVersion = 1
    /// The header fields in the order they came, repeated ones folded into the first whatever
    /// their case (a few per answer: searched in order, no dictionary until the answer is taken).
    private var fields: [(name: String, value: String)] = []
    /// The field an obsolete folded line continues.
    private var lastField: Int?
    private var body: [UInt8] = []
    /// Body bytes read beyond ``maxBodyBytes`` and dropped.
    private(set) var droppedBodyBytes = 0
    /// Whether any byte of an answer (interim answers included) arrived.
    private(set) var receivedAny = false
    /// Whether the answer is to `CONNECT`: a 2xx then ends with its head (the connection becomes
    /// a tunnel, RFC 9110 §9.3.6). Cleared by ``reset()``.
    var answersConnect = false

    init(maxBodyBytes: Int = 1 << 20, maxHeadBytes: Int = 64 << 10) {
        self.maxBodyBytes = maxBodyBytes
        self.maxHeadBytes = maxHeadBytes
    }

    /// Whether a whole answer was read.
    var isComplete: Bool {
        if case .complete = phase { return true }
        return false
    }

    /// Whether the body runs until the server closes the connection (then ``finish()`` ends it).
    var readsUntilClose: Bool {
        if case .untilClose = phase { return true }
        return false
    }

    /// Whether the connection may carry another request after this answer: HTTP/1.1 without
    /// `Connection: close`, or HTTP/1.0 with `Connection: keep-alive`, and a body not delimited by
    /// the connection's end.
    private(set) var keepsAlive = false

    /// Reads what it can of `input`; returns how many bytes it used. It stops after a complete
    /// answer: bytes after it are not used.
    mutating func consume(_ input: UnsafeRawBufferPointer) throws(Malformed) -> Int {
        var index = 0
        if !input.isEmpty { receivedAny = true }
        while index < input.count {
            switch phase {
            case .complete:
                return index
            case .statusLine, .headers, .chunkSize, .trailers:
                guard let text = try readLine(input, &index) else { return index }
                try take(line: text)
            case .body(let remaining):
                let n = min(remaining, input.count - index)
                keep(UnsafeRawBufferPointer(rebasing: input[index..<index + n]))
                index += n
                phase = remaining == n ? .complete : .body(remaining: remaining - n)
            case .chunkData(let remaining):
                let n = min(remaining, input.count - index)
                keep(UnsafeRawBufferPointer(rebasing: input[index..<index + n]))
                index += n
                phase = remaining == n ? .chunkDataEnd : .chunkData(remaining: remaining - n)
            case .chunkDataEnd:
                guard let text = try readLine(input, &index) else { return index }
                guard text.isEmpty else { throw Malformed(description: "a chunk of the body is longer than its size says") }
                // The limit holds for each chunk's size line, and for the trailers together.
                headBytes = 0
                phase = .chunkSize
            case .untilClose:
                keep(UnsafeRawBufferPointer(rebasing: input[index...]))
                index = input.count
            }
        }
        return index
    }

    /// The connection ended: completes an answer whose body runs until the close. Throws when
    /// the answer is incomplete.
    mutating func finish() throws(Malformed) {
        switch phase {
        case .complete: return
        case .untilClose: phase = .complete
        case .statusLine where !receivedAny:
            throw Malformed(description: "the connection closed before any answer")
        default:
            throw Malformed(description: "the connection closed in the middle of the answer")
        }
    }

    /// The complete answer; the parser is then ready for the next one.
    mutating func takeResponse() -> TransportResponse {
        let response = TransportResponse(status: status, headers: HTTPHeaders(fields), body: body)
        reset()
        return response
    }

    /// Forgets everything read, keeping the line buffer's memory.
    mutating func reset() {
        phase = .statusLine
        line.removeAll(keepingCapacity: true)
        headBytes = 0
        status = 0
        minorVersion = 1
        fields.removeAll(keepingCapacity: true)
        lastField = nil
        body = []
        droppedBodyBytes = 0
        receivedAny = false
        keepsAlive = false
        answersConnect = false
    }

    // MARK: - Lines

    /// The next line of `input` from `index` (without its CR LF or bare LF), or nil when the line
    /// continues in the next piece (then what there is was kept).
    private mutating func readLine(_ input: UnsafeRawBufferPointer, _ index: inout Int) throws(Malformed) -> [UInt8]? {
        let rest = UnsafeRawBufferPointer(rebasing: input[index...])
        let newline = rest.firstIndex(of: 0x0A)
        let end = newline ?? rest.count
        headBytes += newline.map { $0 + 1 } ?? end
        guard headBytes <= maxHeadBytes else {
            throw Malformed(description: "the answer's head (status line, header fields or a chunk size line) is longer than \(maxHeadBytes) bytes")
        }
        line.append(contentsOf: UnsafeRawBufferPointer(rebasing: rest[..<end]))
        guard newline != nil else {
            index = input.count
            return nil
        }
        index += end + 1
        if line.last == 0x0D { line.removeLast() }
        defer { line.removeAll(keepingCapacity: true) }
        return line
    }

    private mutating func take(line text: [UInt8]) throws(Malformed) {
        switch phase {
        case .statusLine:
            // Blank lines before a status line are tolerated (some servers send one after a body).
            if text.isEmpty { return }
            try takeStatusLine(text)
            phase = .headers
        case .headers:
            if text.isEmpty { try endOfHead() } else { try takeField(text) }
        case .chunkSize:
            let size = try chunkSize(text)
            headBytes = 0
            phase = size == 0 ? .trailers : .chunkData(remaining: size)
        case .trailers:
            if text.isEmpty { phase = .complete }
        default:
            break
        }
    }

    private mutating func takeStatusLine(_ text: [UInt8]) throws(Malformed) {
        // HTTP/1.x SP 3DIGIT [SP reason]
        let prefix = Array("HTTP/1.".utf8)
        guard text.count >= 12, text.starts(with: prefix), text[8] == 0x20,
              let minor = Int(ascii: text[7...7]), let code = Int(ascii: text[9..<12]),
              text.count == 12 || text[12] == 0x20
        else {
            throw Malformed(description: "the answer does not start with an HTTP/1.x status line: '\(Self.excerpt(text))'")
        }
        status = code
        minorVersion = minor
    }

    private mutating func takeField(_ text: [UInt8]) throws(Malformed) {
        if text.first == 0x20 || text.first == 0x09 {
            // An obsolete folded continuation of the previous field's value.
            guard let lastField else { throw Malformed(description: "the answer's first header field starts with a space") }
            fields[lastField].value += " " + Self.trimmed(text[...])
            return
        }
        guard let colon = text.firstIndex(of: UInt8(ascii: ":")), colon > 0 else {
            throw Malformed(description: "the answer has a header field without a colon: '\(Self.excerpt(text))'")
        }
        guard HTTPToken.isToken(text[..<colon]) else {
            throw Malformed(description: "the answer has a header field whose name is not an HTTP token: '\(Self.excerpt(text))'")
        }
        let name = String(decoding: text[..<colon], as: UTF8.self)
        let value = Self.trimmed(text[(colon + 1)...])
        if let existing = fields.firstIndex(where: { HTTPFieldName.equal($0.name, name) }) {
            fields[existing].value += ", " + value
            lastField = existing
        } else {
            fields.append((name, value))
            lastField = fields.count - 1
        }
    }

    private mutating func endOfHead() throws(Malformed) {
        let connection = field("connection") ?? ""
        let closes = Self.hasToken(connection, "close")
        if (100..<200).contains(status) {
            guard status != 101 else { throw Malformed(description: "the server switched protocols (101), which an upload cannot use") }
            // An interim answer: the real one follows on the same connection.
            let anyBytes = receivedAny
            reset()
            receivedAny = anyBytes
            return
        }
        keepsAlive = minorVersion >= 1 ? !closes : Self.hasToken(connection, "keep-alive")
        let encoding = field("transfer-encoding")?.lowercased()
        if answersConnect && (200..<300).contains(status) {
            keepsAlive = true
            phase = .complete
        } else if status == 204 || status == 304 {
            phase = .complete
        } else if let encoding, !encoding.isEmpty, encoding != "identity" {
            guard encoding.split(separator: ",").last?.trimmingSpaces == "chunked" else {
                throw Malformed(description: "the answer's body has a transfer encoding other than chunked: '\(encoding)'")
            }
            headBytes = 0
            phase = .chunkSize
        } else if let length = field("content-length"), length.utf8.count <= 18, let n = Int(ascii: length.utf8) {
            // The usual case: one length, digits only.
            body.reserveCapacity(min(n, maxBodyBytes))
            phase = n == 0 ? .complete : .body(remaining: n)
        } else if let length = field("content-length") {
            // Repeated identical lengths were folded as "n, n".
            let values = Set(length.split(separator: ",", omittingEmptySubsequences: false).map { $0.trimmingSpaces })
            guard values.count == 1, let text = values.first, text.utf8.count <= 18, let n = Int(ascii: text.utf8) else {
                throw Malformed(description: "the answer has an invalid Content-Length: '\(length)'")
            }
            body.reserveCapacity(min(n, maxBodyBytes))
            phase = n == 0 ? .complete : .body(remaining: n)
        } else {
            keepsAlive = false
            phase = .untilClose
        }
    }

    /// `1*HEXDIG [BWS ";" extension]`: hex digits from the line's first byte (no sign, no space
    /// before them), then only spaces up to an optional extension, which is ignored.
    private func chunkSize(_ text: [UInt8]) throws(Malformed) -> Int {
        let digits = text.prefix { Self.hexValue($0) != nil }
        let rest = text[digits.count...].drop { $0 == 0x20 || $0 == 0x09 }
        guard !digits.isEmpty, digits.count <= 15, rest.isEmpty || rest.first == UInt8(ascii: ";") else {
            throw Malformed(description: "the answer has an invalid chunk size line: '\(Self.excerpt(text))'")
        }
        return digits.reduce(0) { $0 << 4 | Self.hexValue($1)! }
    }

    private static func hexValue(_ byte: UInt8) -> Int? {
        switch byte {
        case 0x30...0x39: Int(byte - 0x30)
        case 0x41...0x46: Int(byte - 0x41 + 10)
        case 0x61...0x66: Int(byte - 0x61 + 10)
        default: nil
        }
    }

    private func field(_ name: String) -> String? {
        fields.first { HTTPFieldName.equal($0.name, name) }?.value
    }

    private mutating func keep(_ bytes: UnsafeRawBufferPointer) {
        let room = max(0, maxBodyBytes - body.count)
        if bytes.count <= room {
            body.append(contentsOf: bytes)
        } else {
            body.append(contentsOf: UnsafeRawBufferPointer(rebasing: bytes[..<room]))
            droppedBodyBytes += bytes.count - room
        }
    }

    // MARK: - Text

    /// Whether the comma-separated `list` holds `token`, compared without regard to ASCII case.
    private static func hasToken(_ list: String, _ token: String) -> Bool {
        if !list.utf8.contains(UInt8(ascii: ",")) { return HTTPFieldName.equal(String(Substring(list).trimmingSpaces), token) }
        return list.split(separator: ",").contains { HTTPFieldName.equal(String($0.trimmingSpaces), token) }
    }

    /// `bytes` without the spaces and tabs around them, as text: one string made, no array.
    private static func trimmed(_ bytes: ArraySlice<UInt8>) -> String {
        var start = bytes.startIndex, end = bytes.endIndex
        while start < end && (bytes[start] == 0x20 || bytes[start] == 0x09) { start += 1 }
        while end > start && (bytes[end - 1] == 0x20 || bytes[end - 1] == 0x09) { end -= 1 }
        return String(decoding: bytes[start..<end], as: UTF8.self)
    }

    /// At most 80 bytes of `bytes` as text, for an error message.
    static func excerpt<C: Collection<UInt8>>(_ bytes: C) -> String {
        let text = String(decoding: bytes.prefix(80), as: UTF8.self)
        return bytes.count > 80 ? text + "…" : text
    }
}

private extension Substring {
    var trimmingSpaces: Substring {
        var s = self
        while s.first == " " || s.first == "\t" { s.removeFirst() }
        while s.last == " " || s.last == "\t" { s.removeLast() }
        return s
    }
}

private extension Int {
    /// The decimal number spelled by `digits` (ASCII), nil when any is not a digit.
    init?<C: Collection<UInt8>>(ascii digits: C) {
        guard !digits.isEmpty else { return nil }
        var value = 0
        for d in digits {
            guard d >= 0x30 && d <= 0x39 else { return nil }
            value = value * 10 + Int(d - 0x30)
        }
        self = value
    }
}

/// The characters of an HTTP token (RFC 9110 §5.6.2), which a header field's name must be.
enum HTTPToken {
    /// Whether `bytes` is a non-empty token: letters, digits and ``!#$%&'*+-.^_`|~``.
    static func isToken<C: Collection<UInt8>>(_ bytes: C) -> Bool {
        !bytes.isEmpty && bytes.allSatisfy(isTokenCharacter)
    }

    static func isTokenCharacter(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"): true
        default: "!#$%&'*+-.^_`|~".utf8.contains(byte)
        }
    }
}
