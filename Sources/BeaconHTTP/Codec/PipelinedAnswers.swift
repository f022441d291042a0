/// The answers to requests pipelined on one connection, in order, from the bytes it reads: the
/// parser finds each answer's end, and the bytes after it (the start of the next answer, read in
/// the same `recv`) are kept for the next one instead of being taken for garbage.
///
/// ```swift
/// var answers = PipelinedAnswers(maxBodyBytes: 1 << 20)
/// if let (response, keepsAlive) = try answers.feed(bytes) { … }   // then answers.next() for the rest
/// ```
package struct PipelinedAnswers {
    /// An answer, and whether the connection may carry the requests behind it (false: HTTP/1.0
    /// or `Connection: close`, or a body delimited by the connection's end).
    package typealias Answer = (response: TransportResponse, keepsAlive: Bool)

    private var parser: HTTPResponseParser
    /// Bytes read after the last answer: the beginning of the next.
    private(set) var leftover: [UInt8] = []

    init(maxBodyBytes: Int) {
        parser = HTTPResponseParser(maxBodyBytes: maxBodyBytes)
    }

    /// Whether any byte of the next answer was read (in the parser or kept).
    var receivedAny: Bool { parser.receivedAny || !leftover.isEmpty }

    /// The next answer from the bytes kept after the last one, if they hold a whole one.
    mutating func next() throws(HTTPResponseParser.Malformed) -> Answer? {
        guard !leftover.isEmpty else { return nil }
        let bytes = leftover
        leftover = []
        var result: Result<Answer?, HTTPResponseParser.Malformed> = .success(nil)
        bytes.withUnsafeBytes { raw in
            result = Result { () throws(HTTPResponseParser.Malformed) -> Answer? in try feed(raw) }
        }
        return try result.get()
    }

    /// Reads `bytes` (after ``next()`` returned nil); returns the answer they complete, keeping
    /// the bytes after it for ``next()``.
    mutating func feed(_ bytes: UnsafeRawBufferPointer) throws(HTTPResponseParser.Malformed) -> Answer? {
        let used = try parser.consume(bytes)
        guard parser.isComplete else { return nil }
        leftover.append(contentsOf: bytes[used...])
        let keepsAlive = parser.keepsAlive
        return (parser.takeResponse(), keepsAlive)
    }

    /// The connection ended: the answer its end completes (a body delimited by the close), or
    /// nil when no byte of an answer came. Throws when an answer was cut.
    mutating func closed() throws(HTTPResponseParser.Malformed) -> Answer? {
        guard receivedAny else { return nil }
        if !leftover.isEmpty, let answer = try next() { return answer }
        try parser.finish()
        return (parser.takeResponse(), false)
    }

    /// Forgets everything read (a new connection).
    mutating func reset() {
        parser.reset()
        leftover = []
    }
}
