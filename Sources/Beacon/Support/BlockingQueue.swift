import BeaconLog
import Foundation
import Synchronization

/// The one way Beacon runs blocking work (disk reads and writes, fsync, waiting for the writer
/// thread) from async code: on a thread outside Swift's concurrency pool, so a task waiting for
/// the disk never holds one of the pool's few threads.
///
/// Work on one queue runs one call at a time, in order, on a ``SerialLane`` of
/// ``BlockingPool/shared``'s threads (`beacon-pool-N`, Beacon's own and bounded; the uploader
/// keeps one queue for its log reads and acknowledgements). One-off work (closing a tracker,
/// waiting for the writer thread) uses the static `BlockingQueue.run`, which runs it on the pool
/// directly: never a thread per call.
///
/// ```swift
/// let io = BlockingQueue(label: "beacon.uploader.io")
/// let batch = try await io.run { try log.read(maxRecords: 100, maxBytes: 1 << 20) }
/// ```
struct BlockingQueue: Sendable {
    /// What the queue is for, for people reading a debugger or a test's message.
    let label: String
    private let lane = SerialLane()

    /// A queue running its work one call at a time, in order.
    init(label: String) {
        self.label = label
    }

    /// Runs `work` on this queue and returns its result (or throws its error), suspending the
    /// calling task meanwhile.
    func run<T: Sendable>(_ work: @escaping @Sendable () throws -> T) async throws -> T {
        try await withCheckedThrowingContinuation { continuation in
            lane.async { continuation.resume(with: Result { try work() }) }
        }
    }

    /// Runs `work` on this queue and returns its result, suspending the calling task meanwhile.
    func run<T: Sendable>(_ work: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            lane.async { continuation.resume(returning: work()) }
        }
    }

    /// Starts `work` on this queue and returns at once; ``Started/value`` gives its result.
    ///
    /// For work that overlaps other work (a checkpoint write during the next request): no task
    /// is created, and awaiting a result that is already there does not suspend.
    func start<T: Sendable>(_ work: @escaping @Sendable () -> T) -> Started<T> {
        let started = Started<T>()
        start(work, into: started)
        return started
    }

    /// Starts `work` on this queue, its result delivered to `started`.
    func start<T: Sendable>(_ work: @escaping @Sendable () -> T, into started: Started<T>) {
        lane.async { started.finish(work()) }
    }

    /// Runs `work` on ``BlockingPool/shared`` (Beacon's bounded threads), suspending the calling
    /// task meanwhile. `work` may wait for the disk or the writer thread, never for other work on
    /// the pool.
    static func run<T: Sendable>(_ work: @escaping @Sendable () -> T) async -> T {
        await BlockingPool.shared.run(work)
    }
}

/// The result of work started on a ``BlockingQueue``, delivered once.
final class Started<T: Sendable>: Sendable {
    private enum State {
        case running([CheckedContinuation<T, Never>])
        case finished(T)
    }

    private let state = Mutex(State.running([]))

    /// The result, once the work finished: at once if it has, without suspending, and on the
    /// caller's executor (`nonsending`: an uploader awaiting it on its actor does not hop off and
    /// back).
    nonisolated(nonsending) var value: T {
        get async {
            if case .finished(let result) = state.withLock({ $0 }) { return result }
            return await withCheckedContinuation { continuation in
                let result = state.withLock { s -> T? in
                    switch s {
                    case .finished(let result): return result
                    case .running(var waiting):
                        waiting.append(continuation)
                        s = .running(waiting)
                        return nil
                    }
                }
                if let result { continuation.resume(returning: result) }
            }
        }
    }

    /// Whether the work finished.
    var isFinished: Bool { result != nil }

    /// The result if the work finished, else nil.
    var result: T? {
        state.withLock { if case .finished(let result) = $0 { result } else { nil } }
    }

    /// Delivers the result (once; a second call does nothing).
    func finish(_ result: T) {
        let waiting = state.withLock { s -> [CheckedContinuation<T, Never>] in
            guard case .running(let waiting) = s else { return [] }
            s = .finished(result)
            return waiting
        }
        for continuation in waiting { continuation.resume(returning: result) }
    }
}
