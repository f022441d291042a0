import Glibc

/// Polls `condition` every 10 ms until it holds or `seconds` pass on the monotonic clock; returns
/// whether it held. For conditions nothing announces (a file another process writes, a port).
/// The default bound is for something expected to happen: it only costs its full length when the
/// test fails, and a loaded 2-core machine (CI's parallel suite) has stalled children for 10 s.
///
/// Blocks its thread: async tests of the tracker use their own `await eventually(_:_:)`, which
/// suspends instead, and is preferred in async code (this one is disfavoured). It is not here, so
/// that the tool's async tests, which poll processes, keep this one.
@_disfavoredOverload
public func eventually(within seconds: Double = 60, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = ContinuousClock.now.advanced(by: .milliseconds(Int64(seconds * 1000)))
    while ContinuousClock.now < deadline {
        if try condition() { return true }
        usleep(10_000)
    }
    return try condition()
}
