import Synchronization

/// A `Mutex` in a class, so closures can share it.
final class Locked<Value: Sendable>: Sendable {
    let mutex: Mutex<Value>
    init(_ value: Value) { mutex = Mutex(value) }
    @inline(__always)
    func withLock<T>(_ body: (inout sending Value) throws -> sending T) rethrows -> sending T {
        try mutex.withLock(body)
    }
}
