@testable import BeaconHTTP
import Foundation
import Testing
@testable import Beacon
import BeaconLog
import BeaconTesting
import BeaconTestSupport

@Suite("Delivery: rules and encodings")
struct DeliveryUnitTests {
    @Test("every status from 100 to 599 maps to the action of the README's status table", arguments: 100...599)
    func statusTable(status: Int) {
        let expected: AnswerAction
        if (200...299).contains(status) {
            expected = .acknowledge
        } else if status == 408 || status == 429 || ((500...599).contains(status) && status != 501 && status != 505) {
            expected = .retry
        } else if status == 413 {
            expected = .split
        } else if status == 400 || status == 422 {
            expected = .reject
        } else {
            expected = .pause
        }
        #expect(AnswerAction(status: status) == expected)
    }

    @Test("backoff caps double from the initial value up to the maximum; full jitter stays under the cap")
    func backoffCaps() {
        let backoff = DeliveryConfiguration.Backoff()
        let caps = (1...12).map { backoff.cap(afterFailures: $0) }
        #expect(caps == [1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300].map { Duration.seconds($0) })
        #expect(backoff.cap(afterFailures: 10_000) == .seconds(300))
        for failures in 1...12 {
            for unit in [0.0, 0.25, 0.5, 0.999] {
                let delay = backoff.delay(afterFailures: failures, unit: unit)
                #expect(delay >= .zero && delay < backoff.cap(afterFailures: failures))
            }
        }
        var noJitter = backoff
        noJitter.jitter = false
        #expect(noJitter.delay(afterFailures: 3, unit: 0.1) == .seconds(4))
    }

    @Test("flushInterval below 5 s is raised to 5 s; nil stays nil")
    func intervalFloor() {
        var config = DeliveryConfiguration(url: URL(string: "http://x/")!)
        #expect(config.effectiveFlushInterval == .seconds(15))
        config.flushInterval = .seconds(1)
        #expect(config.effectiveFlushInterval == .seconds(5))
        config.flushInterval = .milliseconds(4999)
        #expect(config.effectiveFlushInterval == .seconds(5))
        config.flushInterval = nil
        #expect(config.effectiveFlushInterval == nil)
    }

    @Test("HTTP dates in the three formats parse to the same second")
    func httpDates() {
        let expected: Int64 = 784_111_777
        #expect(HTTPDate.parse("Sun, 06 Nov 1994 08:49:37 GMT") == expected)
        #expect(HTTPDate.parse("Sunday, 06-Nov-94 08:49:37 GMT") == expected)
        #expect(HTTPDate.parse("Sun Nov  6 08:49:37 1994") == expected)
        #expect(HTTPDate.parse("not a date") == nil)
        // Round trip with the collector's formatter over many instants.
        for seconds in stride(from: Int64(0), to: 4_000_000_000, by: 97_654_321) {
            let text = LoopbackCollector.httpDate(Date(timeIntervalSince1970: Double(seconds)))
            #expect(HTTPDate.parse(text) == seconds, "\(text)")
        }
    }

    @Test("Retry-After as seconds or as an HTTP date")
    func retryAfter() {
        let now: Int64 = 784_111_777_000
        #expect(HTTPDate.retryAfter("120", nowMillis: now) == .seconds(120))
        #expect(HTTPDate.retryAfter(" 0 ", nowMillis: now) == .zero)
        #expect(HTTPDate.retryAfter("Sun, 06 Nov 1994 08:50:07 GMT", nowMillis: now) == .seconds(30))
        #expect(HTTPDate.retryAfter("Sun, 06 Nov 1994 08:00:00 GMT", nowMillis: now) == .zero)
        #expect(HTTPDate.retryAfter("-5", nowMillis: now) == nil)
        #expect(HTTPDate.retryAfter("soon", nowMillis: now) == nil)
    }

    @Test("bodies in every format split back into the exact stored bytes", arguments: PayloadFormat.allCases)
    func formatsRoundTrip(format: PayloadFormat) throws {
        for count in [0, 1, 2, 7, 50] {
            var records = (0..<count).map { ArraySlice(deliveryEvent($0)) }
            if count > 2 { records[1] = ArraySlice(#"{"s":"a \"quoted\" ] , } [ { string","n":[1,[2,{"x":"]"}]]}"#.utf8) }
            let body = format.body(records, sentAt: 1_700_000_000_123)
            if count == 0 && format == .ndjson { #expect(body.isEmpty); continue }
            let events = try #require(BatchSplitter.events(in: body))
            #expect(events == records.map { Array($0) }, "\(format) \(count)")
            if format == .envelope { #expect(String(decoding: body.prefix(24), as: UTF8.self) == #"{"sent_at":1700000000123"#) }
            if format == .ndjson { #expect(body.last == 0x0A) }
            for gzip in [false, true] where gzip {
                let compressed = Gzip.compress(body)
                #expect(try Gzip.decompress(compressed) == body)
            }
        }
    }

    @Test("the body of records read from a log (slices of shared buffers, some empty) is the generic body, byte for byte", arguments: PayloadFormat.allCases)
    func sliceBodyMatchesGeneric(format: PayloadFormat) {
        var random = SplitMix(seed: 21)
        for _ in 0..<200 {
            // Records cut from a few shared buffers at random places, as a read's cache is cut.
            let buffers = (0..<Int.random(in: 1...3, using: &random)).map { _ in (0..<Int.random(in: 0...400, using: &random)).map { _ in UInt8.random(in: 0x20...0x7E, using: &random) } }
            let records: [ArraySlice<UInt8>] = (0..<Int.random(in: 0...40, using: &random)).map { _ in
                let buffer = buffers[Int.random(in: 0..<buffers.count, using: &random)]
                let start = Int.random(in: 0...buffer.count, using: &random)
                return buffer[start..<Int.random(in: start...buffer.count, using: &random)]
            }
            #expect(format.body(records: records, sentAt: 1_700_000_000_123).array == format.body(records.map { Array($0) }, sentAt: 1_700_000_000_123))
        }
    }

    /// Bodies from just under glibc's mmap threshold to megabytes: the same bytes as the generic
    /// body, in an array below the threshold and in memory the body maps itself from it up (a
    /// large array freed would raise the threshold for the whole process: `RequestBody`).
    @Test("bodies around 128 KiB are the generic body, mapped by themselves from 128 KiB up", arguments: PayloadFormat.allCases)
    func largeBodiesAreMapped(format: PayloadFormat) {
        let shared = (0..<4096).map { UInt8(0x41 + $0 % 26) }
        let overhead = format.body([ArraySlice<UInt8>](), sentAt: 1_700_000_000_123).count + (format == .ndjson ? 1 : 0)
        for target in [FrameBuffer.mappedMinimum - 1, FrameBuffer.mappedMinimum, FrameBuffer.mappedMinimum + 1, 1 << 20, 3 << 20] {
            // n records of 999 bytes and one of the rest (maybe empty): each adds its separator.
            let n = (target - overhead) / 1000, rest = target - overhead - n * 1000
            let records = (0..<n).map { i in shared[(i % 3000)..<(i % 3000 + 999)] } + [shared[0..<rest]]
            let body = format.body(records: records, sentAt: 1_700_000_000_123)
            #expect(body.count == target, "\(format) body for \(target) bytes")
            if case .mapped = body {
                #expect(target >= FrameBuffer.mappedMinimum, "a body of \(target) bytes was mapped")
            } else {
                #expect(target < FrameBuffer.mappedMinimum, "a body of \(target) bytes was an array")
            }
            #expect(body.array == format.body(records.map { Array($0) }, sentAt: 1_700_000_000_123))
        }
    }

    @Test("gzip round-trips sizes around zlib's buffers, concatenated members, and refuses damage")
    func gzipRoundTrip() throws {
        var generator = SystemRandomNumberGenerator()
        for size in [0, 1, 2, 100, 65_535, 65_536, 65_537, 300_000] {
            let bytes = (0..<size).map { _ in UInt8.random(in: 0...15, using: &generator) + 65 }
            let compressed = Gzip.compress(bytes)
            #expect(compressed.prefix(2) == [0x1F, 0x8B], "gzip magic")
            #expect(try Gzip.decompress(compressed) == bytes, "size \(size)")
        }
        let a = Gzip.compress(Array("hello ".utf8)), b = Gzip.compress(Array("world".utf8))
        #expect(try Gzip.decompress(a + b) == Array("hello world".utf8))
        let full = Gzip.compress(Array(repeating: 7, count: 1000))
        for cut in [1, 5, full.count / 2, full.count - 1] {
            #expect(throws: GzipError.self) { try Gzip.decompress(Array(full.prefix(cut))) }
        }
    }

    @Test("event time is found without parsing, and missing or odd values give nil")
    func eventTime() {
        #expect(EventTime.millis(in: ArraySlice(deliveryEvent(5))) == 1_700_000_000_005)
        #expect(EventTime.millis(in: ArraySlice(#"{"event":"x"}"#.utf8)) == nil)
        #expect(EventTime.millis(in: ArraySlice(#"{"time":"soon"}"#.utf8)) == nil)
        #expect(EventTime.millis(in: ArraySlice(#"{"time": 42}"#.utf8)) == 42)
        #expect(EventTime.millis(in: ArraySlice(#"{"time":7"#.utf8)) == 7)
    }

    @Test("the idempotency key depends on the events and their seqs only")
    func idempotencyKey() {
        let records = (0..<5).map { ArraySlice(deliveryEvent($0)) }
        let seqs: [UInt64] = [10, 11, 12, 13, 14]
        let key = IdempotencyKey.make(records: records, seqs: seqs)
        #expect(key == IdempotencyKey.make(records: records.map { ArraySlice(Array($0)) }, seqs: seqs))
        #expect(key.hasPrefix("10-14-"))
        #expect(key != IdempotencyKey.make(records: records, seqs: [11, 12, 13, 14, 15]))
        var changed = records
        changed[2] = ArraySlice(deliveryEvent(99))
        #expect(key != IdempotencyKey.make(records: changed, seqs: seqs))
        #expect(key != IdempotencyKey.make(records: Array(records.prefix(4)), seqs: Array(seqs.prefix(4))))
        // The CRCs a read hands over give the key the records' bytes give.
        #expect(key == IdempotencyKey.make(records: records, seqs: seqs, crcs: records.map { CRC32C.checksum($0) }))
    }

    @Test("a batch read from a log carries each record's checksum, and its key is the one its bytes give")
    func idempotencyKeyFromRead() throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        let log = try deliveryLog(dir, events: 0..<30)
        let batch = try log.read(maxRecords: 30)
        #expect(batch.crcs == batch.records.map { CRC32C.checksum($0) })
        #expect(IdempotencyKey.make(records: batch.records, seqs: batch.seqs, crcs: batch.crcs) == IdempotencyKey.make(records: batch.records, seqs: batch.seqs))
    }

    @Test("the idempotency key changes with any byte of any record, and with where records end")
    func idempotencyKeyEveryByte() {
        // Lengths around the eight-byte words the hash takes, the empty record included.
        let records: [ArraySlice<UInt8>] = [0, 1, 7, 8, 9, 16, 17].map { n in ArraySlice((0..<n).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ n) }) }
        let seqs = (0..<UInt64(records.count)).map { $0 + 100 }
        let key = IdempotencyKey.make(records: records, seqs: seqs)
        var keys: Set<String> = [key]
        for r in records.indices {
            for i in records[r].indices {
                for bit in [0, 7] {
                    var changed = records
                    changed[r][i] ^= 1 << UInt8(bit)
                    keys.insert(IdempotencyKey.make(records: changed, seqs: seqs))
                }
            }
        }
        let flips = records.reduce(0) { $0 + 2 * $1.count }
        #expect(keys.count == flips + 1)
        // The same bytes cut into records differently.
        var moved = records
        moved[2].append(moved[3].removeFirst())
        #expect(IdempotencyKey.make(records: moved, seqs: seqs) != key)
        // A zero byte added at a record's end (the tail word alone would not tell).
        var padded = records
        padded[1].append(0)
        #expect(IdempotencyKey.make(records: padded, seqs: seqs) != key)
    }

    @Test("rejected.jsonl lines are JSON with status, reason and the record verbatim")
    func rejectedLines() throws {
        let dir = DeliveryTempDir()
        defer { dir.remove() }
        try FileManager.default.createDirectory(atPath: dir.path, withIntermediateDirectories: true)
        let file = RejectedFile(directory: dir.path, fileSystem: SystemFileSystem())
        let record = ArraySlice(deliveryEvent(3))
        try file.append([.init(status: 400, reason: "bad \"field\"\n\u{1}", seq: 3, record: record), .init(status: nil, reason: "expired", seq: 4, record: record)], nowMillis: 5)
        let lines = dir.rejectedLines
        #expect(lines.count == 2)
        let first = try #require(try JSONSerialization.jsonObject(with: Data(lines[0].utf8)) as? [String: Any])
        #expect(first["status"] as? Int == 400)
        #expect(first["reason"] as? String == "bad \"field\"\n\u{1}")
        #expect(first["seq"] as? Int == 3)
        #expect((first["record"] as? [String: Any])?["_track_id"] as? Int == 3)
        #expect(lines[1].contains(#""status":null,"reason":"expired""#))
        let attributes = try FileManager.default.attributesOfItem(atPath: dir.path + "/rejected.jsonl")
        #expect((attributes[.posixPermissions] as? Int) == 0o600)
    }
}
