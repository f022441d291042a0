import Glibc

/// Polls `condition` every 10 ms until it holds or `seconds` pass on the monotonic clock; returns
/// whether it held. For conditions nothing announces (a file another process writes, a port).
///
/// Blocks its thread: async tests of the tracker use their own `await eventually(_:_:)`, which
/// suspends instead, and is preferred in async code (this one is disfavoured). It is not here, so
/// that the tool's async tests, which poll processes, keep this one.
@_disfavoredOverload
public func eventually(within seconds: Double = 10, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = ContinuousClock.now.advanced(by: .milliseconds(Int64(seconds * 1000)))
    while ContinuousClock.now < deadline {
        if try condition() { return true }
        usleep(10_000)
    }
    return try condition()
}
