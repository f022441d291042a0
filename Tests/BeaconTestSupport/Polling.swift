import Glibc

/// Polls `condition` every 10 ms until it holds or `seconds` pass on the monotonic clock; returns
/// whether it held. For conditions nothing announces (a file another process writes, a port).
@_disfavoredOverload
public func eventually(within seconds: Double = 10, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = ContinuousClock.now.advanced(by: .milliseconds(Int64(seconds * 1000)))
    while ContinuousClock.now < deadline {
        if try condition() { return true }
        usleep(10_000)
    }
    return try condition()
}

/// Polls `condition` every 5 ms, suspending between tries, until it holds or `seconds` pass on
/// the monotonic clock; returns whether it held.
public func eventually(_ seconds: Double = 5, _ condition: () async -> Bool) async -> Bool {
    let deadline = ContinuousClock.now.advanced(by: .milliseconds(Int64(seconds * 1000)))
    while ContinuousClock.now < deadline {
        if await condition() { return true }
        try? await Task.sleep(for: .milliseconds(5))
    }
    return await condition()
}
