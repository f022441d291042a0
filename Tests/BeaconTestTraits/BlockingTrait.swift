import Testing

/// A suite or test whose bodies block their thread (child processes, `usleep` polls, blocking
/// sockets, fsync loops): they run on threads of their own, not on the concurrency pool.
///
/// Swift Testing runs every test, synchronous ones included, as a task on the concurrency pool,
/// which has about one thread per core (two on CI's machine) and adds one only when its threads
/// stayed blocked for a while. Blocking tests there stall the async tests beside them (their
/// timers, their uploaders), whose deadlines then pass with nothing done: a shutdown test saw
/// none of 320 events delivered in 20 s. With this trait the test's task prefers
/// ``BlockingTestExecutor``, so its body and its child tasks run on that executor's threads
/// (`Task {}` inside it does not inherit the preference: the pool runs those, as usual).
///
/// ```swift
/// @Suite("beacon send", .blocking) struct SendTests { ... }
/// ```
public struct BlockingTrait: SuiteTrait, TestTrait, TestScoping {
    public var isRecursive: Bool { true }

    public func provideScope(for test: Test, testCase: Test.Case?, performing function: @Sendable () async throws -> Void) async throws {
        try await withTaskExecutorPreference(BlockingTestExecutor.shared) { try await function() }
    }
}

extension Trait where Self == BlockingTrait {
    /// The tests block their thread: they run on threads of their own (``BlockingTrait``).
    public static var blocking: Self { BlockingTrait() }
}
