import Glibc

/// A pthread mutex with one condition variable on `CLOCK_MONOTONIC`, for the hand-off between
/// `track` and the writer thread (Synchronization's `Mutex` has no condition variable).
final class ConditionLock: @unchecked Sendable {
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)

    init() {
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
    }

    deinit {
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    @inline(__always) func lock() { pthread_mutex_lock(mutex) }
    @inline(__always) func unlock() { pthread_mutex_unlock(mutex) }

    /// Wakes every waiter. Call with the lock held.
    @inline(__always) func broadcast() { pthread_cond_broadcast(condition) }

    /// Waits for a broadcast. Call with the lock held; spurious wake-ups happen, so re-check.
    func wait() { pthread_cond_wait(condition, mutex) }

    /// Waits for a broadcast until `deadline` (nanoseconds of `CLOCK_MONOTONIC`); returns false
    /// once the deadline has passed.
    func wait(untilNanoseconds deadline: UInt64) -> Bool {
        var spec = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
        return pthread_cond_timedwait(condition, mutex, &spec) != ETIMEDOUT
    }

    /// `CLOCK_MONOTONIC` now, in nanoseconds.
    static func monotonicNanoseconds() -> UInt64 {
        var spec = timespec()
        clock_gettime(CLOCK_MONOTONIC, &spec)
        return UInt64(spec.tv_sec) * 1_000_000_000 + UInt64(spec.tv_nsec)
    }
}
