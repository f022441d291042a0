import Dispatch
import Foundation
import Glibc
import Synchronization
import BeaconTestSupport
import Testing
import BeaconTestTraits
@testable import Beacon
import BeaconTesting
import DelayProxy

/// The benchmark's delay proxy: it adds its round trip to every exchange, and delays a stream by
/// its one-way time once, not per chunk.
@Suite("Delay proxy: a collector far away on loopback", .timeLimit(.minutes(1)), .blocking)
struct DelayProxyTests {
    @Test("a request through the proxy takes at least its round trip, and arrives intact", arguments: [20, 100])
    func requestTakesRoundTrip(rtt: Int) async throws {
        let collector = try LoopbackCollector()
        defer { collector.stop() }
        let proxy = try DelayProxy(to: collector.port, oneWay: .milliseconds(rtt / 2))
        defer { proxy.stop() }
        let transport = SocketTransport()
        defer { transport.close() }
        let url = URL(string: "http://127.0.0.1:\(proxy.port)/events")!
        let body = Array(#"[{"n":1}]"#.utf8)
        for i in 0..<3 {
            let start = ContinuousClock.now
            let response = try await transport.send(TransportRequest(url: url, headers: [("Content-Type", "application/json")], body: body))
            let took = ContinuousClock.now - start
            #expect(response.status == 200)
            #expect(took >= .milliseconds(rtt), "request \(i) took \(took), less than the round trip")
        }
        #expect(collector.requests.count == 3 && collector.requests.allSatisfy { $0.body == body })
        #expect(proxy.connections == 1, "keep-alive through the proxy")
    }

    /// 32 MiB through a proxy with 200 ms each way: a proxy that slept per chunk read (128 chunks
    /// of 256 KiB at most) would take 25 s or more; this one delays the stream once.
    @Test("a stream is delayed once, not per chunk: 32 MiB arrive intact and in order well within the time a per-chunk delay takes")
    func streamDelayedOnce() throws {
        let sink = try RawSink()
        let proxy = try DelayProxy(to: sink.port, oneWay: .milliseconds(200))
        defer { proxy.stop() }
        var bytes = [UInt8](repeating: 0, count: 32 << 20)
        var generator = SplitMix(seed: 27)
        for i in stride(from: 0, to: bytes.count, by: 8) {
            withUnsafeBytes(of: generator.next()) { bytes.replaceSubrange(i..<i + 8, with: $0) }
        }
        let start = ContinuousClock.now
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = proxy.port.bigEndian
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let connected = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        try #require(connected == 0)
        var sent = 0
        while sent < bytes.count {
            let n = bytes.withUnsafeBytes { send(fd, $0.baseAddress! + sent, bytes.count - sent, Int32(MSG_NOSIGNAL)) }
            try #require(n > 0)
            sent += n
        }
        shutdown(fd, Int32(SHUT_WR))
        let received = sink.wait()
        let took = ContinuousClock.now - start
        close(fd)
        #expect(received == bytes, "the bytes arrive intact and in order")
        #expect(took >= .milliseconds(200))
        // Below the 25.6 s that 128 delays of 200 ms take, whatever the load; not a speed bound.
        #expect(took < .seconds(25), "took \(took): delayed per chunk?")
    }
}

/// Accepts one connection and reads it to its end on a thread of its own.
final class RawSink: Sendable {
    let port: UInt16
    private let listener: Int32
    private let done = DispatchSemaphore(value: 0)
    private let bytes = Box()

    final class Box: Sendable {
        let value = Mutex<[UInt8]>([])
        func set(_ bytes: [UInt8]) { value.withLock { $0 = bytes } }
        func get() -> [UInt8] { value.withLock { $0 } }
    }

    init() throws {
        let listener = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        self.listener = listener
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        let bound = withUnsafePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { bind(listener, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard bound == 0, listen(listener, 4) == 0 else { throw POSIXError(.EADDRINUSE) }
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        _ = withUnsafeMutablePointer(to: &address) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(listener, $0, &length) } }
        port = UInt16(bigEndian: address.sin_port)
        let (done, bytes) = (done, bytes)
        let thread = Thread {
            let fd = accept(listener, nil, nil)
            var all: [UInt8] = []
            var buffer = [UInt8](repeating: 0, count: 1 << 16)
            while fd >= 0 {
                let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
                if n <= 0 { break }
                all.append(contentsOf: buffer[..<n])
            }
            if fd >= 0 { close(fd) }
            close(listener)
            bytes.set(all)
            done.signal()
        }
        thread.start()
    }

    /// The bytes read, once the connection ended.
    func wait() -> [UInt8] {
        done.wait()
        return bytes.get()
    }
}
