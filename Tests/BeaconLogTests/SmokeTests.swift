import Foundation
import Testing
@testable import BeaconLog

/// A temporary directory removed when the test ends.
func withTemporaryDirectory<T>(_ body: (String) throws -> T) throws -> T {
    let path = FileManager.default.temporaryDirectory.appendingPathComponent("beacon-smoke-\(UUID().uuidString)").path
    defer { try? FileManager.default.removeItem(atPath: path) }
    return try body(path)
}

@Suite struct SmokeTests {
    @Test(arguments: [BeaconLog.Durability.everyRecord, .batched(records: 7, interval: .milliseconds(5)), .none])
    func appendReadAcknowledgeAcrossRollsAndReopen(durability: BeaconLog.Durability) throws {
        try withTemporaryDirectory { dir in
            var config = BeaconLog.Configuration(directory: dir)
            config.durability = durability
            config.segmentBytes = 4096
            config.maxBytes = 1 << 20
            let records = (0..<300).map { #"{"n":\#($0),"pad":"\#(String(repeating: "x", count: $0 % 50))"}"# }
            do {
                let log = try BeaconLog(configuration: config)
                for (i, r) in records.enumerated() { #expect(try log.append(r) == UInt64(i)) }
                try log.sync()
                #expect(log.stats.durableSeq == 299)
                var seen: [String] = []
                var cursor: LogPosition?
                while true {
                    let batch = try log.read(from: cursor, maxRecords: 50)
                    if batch.isEmpty { break }
                    cursor = batch.end
                    seen += batch.records.map { String(decoding: $0, as: UTF8.self) }
                    if seen.count == 100 { try log.acknowledge(through: batch.end) }
                }
                #expect(seen == records)
                #expect(log.stats.segments > 3)
                try log.close()
            }
            let names = try FileManager.default.contentsOfDirectory(atPath: dir).filter { $0.hasSuffix(".jsonl") }
            for name in names {
                let size = try FileManager.default.attributesOfItem(atPath: dir + "/" + name)[.size] as! Int
                #expect(size <= 4096)
            }
            let log = try BeaconLog(configuration: config)
            #expect(log.checkpoint.seq == 100)
            var rest: [String] = []
            while true {
                let batch = try log.read(maxRecords: 64)
                if batch.isEmpty { break }
                rest += batch.records.map { String(decoding: $0, as: UTF8.self) }
                try log.acknowledge(through: batch.end)
            }
            #expect(rest == Array(records[100...]))
            #expect(try log.append("{}") == 300)
            #expect(log.stats.pendingRecords == 1)
            try log.close()
        }
    }

    @Test func frameAndCRC() {
        #expect(CRC32C.checksum(Array("123456789".utf8)) == 0xE306_9283)
        #expect(CRC32C.checksum([UInt8](repeating: 0, count: 32)) == 0x8A91_36AA)
        let frame = String(decoding: Frame.encode(seq: 41, record: Array(#"{"a":1}"#.utf8)), as: UTF8.self)
        let crc = CRC32C.checksum(Array(#"{"a":1}"#.utf8))
        #expect(frame == #"{"seq":41,"crc":\#(crc),"event":{"a":1}}"# + "\n")
    }

    @Test func tornTailIsCutAndWritingContinuesInANewSegment() throws {
        try withTemporaryDirectory { dir in
            do {
                let log = try BeaconLog(directory: dir)
                for i in 0..<10 { try log.append(#"{"i":\#(i)}"#) }
                try log.close()
            }
            let segment = dir + "/" + SegmentName.fileName(0)
            let handle = try #require(FileHandle(forWritingAtPath: segment))
            try handle.seekToEnd()
            try handle.write(contentsOf: Data(#"{"seq":10,"crc":1,"ev"#.utf8) + Data(count: 100))
            try handle.close()
            let log = try BeaconLog(directory: dir)
            #expect(log.stats.truncatedBytes == 121)
            try log.append(#"{"i":10}"#)
            try log.sync()
            let batch = try log.read(maxRecords: 100)
            #expect(batch.seqs == Array(0...10))
            #expect(FileManager.default.fileExists(atPath: dir + "/" + SegmentName.fileName(1)))
            #expect(BeaconLog.lockHolder(.writer, directory: dir) == getpid())
            #expect(throws: BeaconLogError.self) { try BeaconLog(directory: dir) }
            try log.close()
            #expect(BeaconLog.lockHolder(.writer, directory: dir) == nil)
            #expect(try BeaconLog.verify(directory: dir).isClean)
        }
    }
}
