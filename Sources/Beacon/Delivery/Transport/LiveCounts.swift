import Foundation
import Synchronization

/// How many requests (``HTTPExchange``) and request bodies a transport still holds in memory.
package final class LiveCounts: Sendable {
    package let exchanges = Atomic<Int>(0)
    package let bodies = Atomic<Int>(0)

    package init() {}

    /// `bytes` as `Data` whose release is counted in ``bodies``.
    package func countedData(_ bytes: [UInt8]) -> Data {
        let count = bytes.count
        let memory = UnsafeMutableRawPointer.allocate(byteCount: max(1, count), alignment: 1)
        bytes.withUnsafeBytes { memory.copyMemory(from: $0.baseAddress ?? UnsafeRawPointer(memory), byteCount: count) }
        bodies.add(1, ordering: .relaxed)
        return Data(bytesNoCopy: memory, count: count, deallocator: .custom { [bodies = self] pointer, _ in
            pointer.deallocate()
            bodies.bodies.subtract(1, ordering: .relaxed)
        })
    }

    package var current: (exchanges: Int, bodies: Int) {
        (exchanges.load(ordering: .relaxed), bodies.load(ordering: .relaxed))
    }
}
