import BeaconTestSupport
import Foundation
import Glibc
import Synchronization

/// The harness's own HTTP/1.1 collector on 127.0.0.1, a thread per connection, taking NDJSON
/// bodies on `/sidecar` and `/tracker`.
///
/// Under ``Mode/chaos`` it answers each request a way drawn from its seeded generator: 200, 500,
/// 503, 429 with `Retry-After: 1`, 413 (only for more than one event), no answer at all (until
/// the client gives up or the mode changes), an answer cut mid-body, or a connection reset. A
/// request holding a poison event that would have been accepted gets 400 instead. A random
/// refusal is never drawn twice in a row for requests starting at the same event, so that only
/// poison events can keep failing: an event set aside for anything else is a defect. Under
/// ``Mode/clean`` every request is accepted (poison excepted). ``goDown()`` closes the listener
/// and every connection (the port refuses connections), ``comeUp()`` listens on the same port again.
///
/// A request's events count as delivered when the collector decides to accept it, before the
/// answer is written (as a collector stores before it answers); each event's bytes are checked
/// then: a sidecar event against the bytes the producer wrote, a tracker event against its first copy.
final class ChaosCollector: Sendable {
    enum Mode: Sendable { case chaos, clean }

    enum Answer: String, CaseIterable, Sendable {
        case ok = "200", badRequest = "400", tooLarge = "413", tooMany = "429", internalError = "500", unavailable = "503"
        case hang, cut, reset
    }

    /// What arrived from one source, in the order the collector accepted it.
    struct Arrivals: Sendable {
        /// Each accepted event's id, in acceptance order (re-sends included).
        var ids: [UInt64] = []
        /// Accepted requests holding at least one event accepted before.
        var requestsWithDuplicates = 0
        /// Events whose bytes were not those produced (or not those of the event's first copy).
        var byteMismatches = 0
        var mismatchExamples: [String] = []
        /// Tracker events: a hash of the first copy's bytes, by id.
        var firstCopy: [UInt64: UInt64] = [:]
        var seen = Set<UInt64>()
        /// Every request with its events and answer, in the order decided (for ``ChaosOrder``).
        var requests: [ChaosOrder.Request] = []
        /// When the collector answered 400 to a request holding a poison event, by event id
        /// (milliseconds since 1970, as ``downWindows``): what a set-aside must rest on.
        var refusals: [UInt64: [Int64]] = [:]
    }

    private struct State {
        var mode = Mode.chaos
        var listener: Int32 = -1
        var generator: SplitMix
        var answers: [Answer: Int] = [:]
        /// Requests by first event that got a random refusal last time (key: source, first id).
        var refusedLast = Set<String>()
        var arrivals: [ChaosSource: Arrivals] = [:]
        var connections = Set<Int32>()
        var malformed: [String] = []
        /// `collector.log`: one line per request (seconds since the start, source, first id,
        /// events, answer).
        var log: UnsafeMutablePointer<FILE>?
        /// When the port was closed, in milliseconds since 1970: from, and to (nil while down).
        var downWindows: [(from: Int64, to: Int64?)] = []
    }

    let port: UInt16
    let events: ChaosEvents
    private let state: Mutex<State>

    private let started = Date()

    init(events: ChaosEvents, seed: UInt64, logPath: String) throws {
        self.events = events
        // A free port, read back; listened on (with SO_REUSEADDR, so that the connections of one
        // life of the collector never keep the next from listening on the same port).
        let probe = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = loopbackAddress(0)
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let bound = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(probe, $0, length) == 0 && getsockname(probe, $0, &length) == 0 }
        }
        close(probe)
        guard bound else { throw ChaosFailure("cannot bind a port of 127.0.0.1: \(String(cString: strerror(errno)))") }
        port = UInt16(bigEndian: address.sin_port)
        state = Mutex(State(generator: SplitMix(seed: seed), log: fopen(logPath, "a")))
        try comeUp()
    }

    func url(_ source: ChaosSource) -> String { "http://127.0.0.1:\(port)\(source.path)" }

    var answers: [Answer: Int] { state.withLock { $0.answers } }

    /// The times the port was closed (milliseconds since 1970), the last one open-ended while down.
    var downWindows: [ClosedRange<Int64>] { state.withLock { $0.downWindows.map { $0.from...($0.to ?? Int64.max) } } }

    static func epochMillis() -> Int64 { Int64(Date().timeIntervalSince1970 * 1000) }
    var malformed: [String] { state.withLock { $0.malformed } }

    func arrivals(_ source: ChaosSource) -> Arrivals { state.withLock { $0.arrivals[source] ?? Arrivals() } }

    func setMode(_ mode: Mode) {
        note("mode \(mode)")
        state.withLock { $0.mode = mode }
    }

    /// A line in `collector.log` (the harness notes its own actions there too, on the same clock).
    func note(_ text: String) {
        state.withLock { s in
            guard let log = s.log else { return }
            fputs("\(String(format: "%.3f", Date().timeIntervalSince(started))) \(text)\n", log)
            fflush(log)
        }
    }

    /// Closes the listener and every open connection: new connections are refused until ``comeUp()``.
    func goDown() {
        note("down")
        state.withLock { $0.downWindows.append((Self.epochMillis(), nil)) }
        let (listener, connections) = state.withLock { s in
            defer { s.listener = -1 }
            return (s.listener, s.connections)
        }
        if listener >= 0 {
            shutdown(listener, Int32(SHUT_RDWR))
            close(listener)
        }
        // The connections' threads see end-of-file and close them.
        for fd in connections { shutdown(fd, Int32(SHUT_RDWR)) }
    }

    /// Listens on the same port again (retrying for 10 s while the port is not free).
    func comeUp() throws {
        note("up")
        let end = Date().addingTimeInterval(10)
        while true {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            var yes: Int32 = 1
            setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, socklen_t(MemoryLayout<Int32>.size))
            var address = loopbackAddress(port)
            let bound = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            if bound == 0 && listen(fd, 128) == 0 {
                state.withLock { s in
                    s.listener = fd
                    if let last = s.downWindows.indices.last, s.downWindows[last].to == nil { s.downWindows[last].to = Self.epochMillis() }
                }
                startAccepting(fd)
                return
            }
            let reason = String(cString: strerror(errno))
            close(fd)
            guard Date() < end else { throw ChaosFailure("the collector cannot listen on 127.0.0.1:\(port) again: \(reason)") }
            usleep(50_000)
        }
    }

    private func startAccepting(_ listener: Int32) {
        let thread = Thread { [self] in
            while true {
                let client = accept(listener, nil, nil)
                if client < 0 {
                    if errno == EINTR || errno == ECONNABORTED { continue }
                    return
                }
                let open = state.withLock { s in
                    guard s.listener == listener else { return false }
                    s.connections.insert(client)
                    return true
                }
                guard open else {
                    close(client)
                    return
                }
                let worker = Thread { [self] in
                    serve(client)
                    state.withLock { _ = $0.connections.remove(client) }
                    close(client)
                }
                worker.start()
            }
        }
        thread.start()
    }

    // MARK: A connection

    private func serve(_ fd: Int32) {
        // A stopped (SIGSTOP) client may hold a request half-sent for seconds; a gone one is
        // closed after two minutes at most.
        var timeout = timeval(tv_sec: 120, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let reader = ScriptedConnection(connectedFD: fd)
        while let (head, body) = reader.readRequest() {
            let lines = head.split(separator: "\r\n", omittingEmptySubsequences: false)
            let target = lines.first?.split(separator: " ").dropFirst().first.map(String.init) ?? ""
            guard let source = ChaosSource.allCases.first(where: { target.hasPrefix($0.path) }) else {
                state.withLock { $0.malformed.append("a request for \(target)") }
                write(fd, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                continue
            }
            let eventLines = body.split(separator: 0x0A)
            let ids = eventLines.map { ChaosEvents.id(in: $0) }
            guard !ids.contains(nil), let first = ids.first ?? nil else {
                state.withLock { $0.malformed.append("\(source) body without an event id in every line: \(String(decoding: body.prefix(200), as: UTF8.self))") }
                write(fd, "HTTP/1.1 422 Unprocessable\r\nContent-Length: 0\r\n\r\n")
                continue
            }
            let answer = decide(source, first: first, ids: ids.map { $0! }, lines: eventLines)
            switch answer {
            case .ok:
                write(fd, "HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n{\"ok\":true}")
            case .badRequest:
                let poison = ids.compactMap { $0 }.filter { events.isPoison($0, source) }.map(String.init).joined(separator: ",")
                let body = "poison event \(poison)"
                write(fd, "HTTP/1.1 400 Bad Request\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)")
            case .tooLarge:
                write(fd, "HTTP/1.1 413 Content Too Large\r\nContent-Length: 0\r\n\r\n")
            case .tooMany:
                write(fd, "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Length: 0\r\n\r\n")
            case .internalError, .unavailable:
                let body = "chaos says \(answer.rawValue)"
                write(fd, "HTTP/1.1 \(answer.rawValue) Chaos\r\nContent-Length: \(body.utf8.count)\r\n\r\n\(body)")
            case .hang:
                // No answer: until the client gives up (its timeout, a signal) or the collector
                // goes down, at most 35 s.
                var hang = timeval(tv_sec: 35, tv_usec: 0)
                setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &hang, socklen_t(MemoryLayout<timeval>.size))
                reader.waitForClose()
                return
            case .cut:
                write(fd, "HTTP/1.1 200 OK\r\nContent-Length: 64\r\n\r\n{\"ok\":tr")
                return
            case .reset:
                var linger = Glibc.linger(l_onoff: 1, l_linger: 0)
                setsockopt(fd, SOL_SOCKET, SO_LINGER, &linger, socklen_t(MemoryLayout<Glibc.linger>.size))
                return
            }
        }
    }

    /// Draws the answer to a request of `ids` and, when it is accepted, records its events.
    private func decide(_ source: ChaosSource, first: UInt64, ids: [UInt64], lines: [ArraySlice<UInt8>]) -> Answer {
        let poisoned = ids.contains { events.isPoison($0, source) }
        return state.withLock { s in
            var answer = Answer.ok
            if s.mode == .chaos {
                let roll = s.generator.next() % 1000
                answer = switch roll {
                case 0..<900: .ok
                case 900..<915: .internalError
                case 915..<930: .unavailable
                case 930..<945: .tooMany
                case 945..<965: .tooLarge
                case 965..<970: .hang
                case 970..<985: .cut
                default: .reset
                }
            }
            let key = "\(source) \(first)"
            if answer == .tooLarge && ids.count == 1 { answer = .ok }
            if answer != .ok && answer != .tooLarge && s.refusedLast.contains(key) { answer = .ok }
            if answer == .ok && poisoned { answer = .badRequest }
            if answer == .ok || answer == .badRequest || answer == .tooLarge {
                s.refusedLast.remove(key)
            } else {
                s.refusedLast.insert(key)
            }
            s.answers[answer, default: 0] += 1
            s.arrivals[source, default: Arrivals()].requests.append(ChaosOrder.Request(ids: ids, answer: answer))
            if let log = s.log {
                fputs("\(String(format: "%.3f", Date().timeIntervalSince(started))) \(source) \(first) \(ids.count) \(answer.rawValue)\(poisoned ? " poison" : "")\n", log)
                fflush(log)
            }
            if answer == .ok { record(source, ids, lines, in: &s) }
            if answer == .badRequest {
                let now = Self.epochMillis()
                for id in ids where events.isPoison(id, source) { s.arrivals[source, default: Arrivals()].refusals[id, default: []].append(now) }
            }
            return answer
        }
    }

    private func record(_ source: ChaosSource, _ ids: [UInt64], _ lines: [ArraySlice<UInt8>], in s: inout State) {
        var arrivals = s.arrivals[source] ?? Arrivals()
        var duplicate = false
        for (id, line) in zip(ids, lines) {
            arrivals.ids.append(id)
            if !arrivals.seen.insert(id).inserted { duplicate = true }
            let matches: Bool
            switch source {
            case .sidecar:
                matches = line.elementsEqual(events.sidecarLine(id))
            case .tracker:
                let hash = Self.hash(line)
                if let first = arrivals.firstCopy[id] {
                    matches = first == hash
                } else {
                    arrivals.firstCopy[id] = hash
                    matches = line.firstRange(of: Array(#""event":"Chaos""#.utf8)) != nil
                }
            }
            if !matches {
                arrivals.byteMismatches += 1
                if arrivals.mismatchExamples.count < 3 { arrivals.mismatchExamples.append("id \(id): \(String(decoding: line.prefix(160), as: UTF8.self))") }
            }
        }
        if duplicate { arrivals.requestsWithDuplicates += 1 }
        s.arrivals[source] = arrivals
    }

    /// FNV-1a of `bytes`.
    static func hash(_ bytes: ArraySlice<UInt8>) -> UInt64 {
        var h: UInt64 = 0xcbf2_9ce4_8422_2325
        for byte in bytes { h = (h ^ UInt64(byte)) &* 0x100_0000_01b3 }
        return h
    }

    private func write(_ fd: Int32, _ text: String) {
        let bytes = Array(text.utf8)
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + sent, $0.count - sent, Int32(MSG_NOSIGNAL)) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return }
            sent += n
        }
    }
}

/// A failure of the harness itself (not an accounting failure): it cannot go on.
struct ChaosFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
