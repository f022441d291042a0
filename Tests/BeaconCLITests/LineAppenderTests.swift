import BeaconLog
import Foundation
import Glibc
import Testing
import BeaconTestTraits
@testable import BeaconCLI

/// The line splitter of `beacon append`, fed through a pipe in chunks of every size: lines split
/// across reads, CRLF, blank and bad lines, and lines longer than the buffer come out the same.
@Suite(.blocking) struct LineAppenderTests {
    static let input: [UInt8] = {
        var text = ""
        for (i, event) in events(400).enumerated() {
            text += i % 5 == 0 ? event + "\r\n" : event + "\n"
            if i % 97 == 1 { text += "\n" }  // blank line: refused
            if i % 131 == 2 { text += "{\"x\":[1,2}\n" }  // not JSON: refused
        }
        text += "[\"" + String(repeating: "z", count: 3000) + "\"]\n"  // over --max-bytes 2048: refused
        text += "{\"last\":true}"  // no final newline
        return Array(text.utf8)
    }()

    static var expected: [String] { events(400) + ["{\"last\":true}"] }

    @Test(arguments: [1, 2, 3, 7, 64, 1000, 4096, 65536, 1 << 20])
    func chunkingDoesNotChangeTheRecords(_ chunk: Int) throws {
        try withTemporaryDirectory { dir in
            var config = BeaconLog.Configuration(directory: dir)
            config.durability = .none
            config.maxRecordBytes = 2048
            let log = try BeaconLog(configuration: config)
            var fds: [Int32] = [0, 0]
            #expect(pipe(&fds) == 0)
            let (readEnd, writeEnd) = (fds[0], fds[1])
            let writer = Thread {
                var offset = 0
                Self.input.withUnsafeBytes { raw in
                    while offset < raw.count {
                        let n = write(writeEnd, raw.baseAddress! + offset, min(chunk, raw.count - offset))
                        if n <= 0 { break }
                        offset += n
                    }
                }
                close(writeEnd)
            }
            writer.start()
            var appender = LineAppender(log: log, maxRecordBytes: 2048, eachDurable: false)
            appender.stderr = Console(fd: open("/dev/null", O_WRONLY))
            try appender.appendLines(from: readEnd)
            close(readEnd)
            #expect(appender.refused == 5 + 4 + 1)  // blank lines, bad lines, the long one
            #expect(appender.appended == Self.expected.count)
            try log.sync()  // under .none, buffered records are not readable until written
            var got: [String] = []
            while true {
                let batch = try log.read(maxRecords: 10_000)
                if batch.isEmpty { break }
                got += batch.records.map { String(decoding: $0, as: UTF8.self) }
                try log.acknowledge(through: batch.end)
            }
            #expect(got == Self.expected)
            try log.close()
        }
    }
}
