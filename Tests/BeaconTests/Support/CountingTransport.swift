import Foundation
@testable import Beacon
import Synchronization

/// `SocketTransport`, pipelining included, counting the requests it starts to write: what a test
/// asks when "nothing more was sent" must not depend on when a collector's thread records a
/// request (a request an ending cut short can be recorded long after, a duplicate it may accept).
final class CountingTransport: PipeliningTransport {
    let base = SocketTransport()
    private let count = Atomic(0)

    /// Requests started so far (sent whole or not).
    var started: Int { count.load(ordering: .sequentiallyConsistent) }

    func send(_ request: TransportRequest) async throws -> TransportResponse {
        count.add(1, ordering: .sequentiallyConsistent)
        return try await base.send(request)
    }

    func writePipelined(_ request: TransportRequest) async throws {
        count.add(1, ordering: .sequentiallyConsistent)
        try await base.writePipelined(request)
    }

    func readPipelined(timeout: Duration) async throws -> (response: TransportResponse, keepsAlive: Bool) {
        try await base.readPipelined(timeout: timeout)
    }

    func dropPipeline() { base.dropPipeline() }
}

extension CountingTransport: ReachabilityProbing {
    func probe(_ url: URL, timeout: Duration, cancellation: ProbeCancellation) -> Bool {
        base.probe(url, timeout: timeout, cancellation: cancellation)
    }
}
