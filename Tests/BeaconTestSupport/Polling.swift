import Glibc

/// Polls `condition` every 10 ms until it holds or `seconds` pass on the monotonic clock; returns
/// whether it held. For conditions nothing announces (a file another process writes, a port).
/// The default bound is for something expected to happen: it only costs its full length when the
/// test fails, and a loaded 2-core machine (CI's parallel suite) has stalled children for 10 s.
///
/// Blocks its thread: for the blocking suites (`.blocking`) and helpers that run on threads of
/// their own; async code uses ``eventually(_:_:)``, which suspends instead.
@_disfavoredOverload
public func eventually(within seconds: Double = 60, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = ContinuousClock.now.advanced(by: .milliseconds(Int64(seconds * 1000)))
    while ContinuousClock.now < deadline {
        if try condition() { return true }
        usleep(10_000)
    }
    return try condition()
}

/// Polls `condition` every 5 ms, suspending between tries (never blocking a thread of the
/// concurrency pool), until it holds or `seconds` pass on the monotonic clock; returns whether it
/// held. The default bound is for something expected to happen, as ``eventually(within:_:)``'s.
///
/// In a cancelled task (a test past its time limit, a cancelled task group) it tries once more
/// and returns: a cancelled sleep throws at once, so the loop would spin on a pool thread until
/// its bound, and swift-testing records a backtrace for every error thrown. A loaded full run
/// found both threads of a 2-core machine's pool spinning in cancelled sleeps, and 494 issues,
/// nearly all time limits of async tests that got no thread.
public func eventually(_ seconds: Double = 30, _ condition: () async -> Bool) async -> Bool {
    let deadline = ContinuousClock.now.advanced(by: .milliseconds(Int64(seconds * 1000)))
    while ContinuousClock.now < deadline {
        if await condition() { return true }
        guard (try? await Task.sleep(for: .milliseconds(5))) != nil else { break }
    }
    return await condition()
}
