import Glibc

/// A pthread mutex with one condition variable on `CLOCK_MONOTONIC`, and the state it guards,
/// for the hand-off between `track` and the writer thread and for Beacon's own threads (``BlockingPool``, ``SerialLane``, ``TimerThread``) (Synchronization's `Mutex` has no
/// condition variable).
///
/// The state is reachable only inside ``withLock(_:)``, through the handle its body receives:
/// the handle reads and writes the state, waits on the condition (which releases the mutex while
/// waiting) and wakes waiters. The handle is not `Sendable`, so it cannot reach another thread;
/// it is valid until its body returns.
///
/// ```swift
/// let lock = ConditionLock(State())
/// lock.withLock { held in
///     while held.state.queue.isEmpty { held.wait() }
///     held.state.queue.removeAll()
/// }
/// ```
package final class ConditionLock<State: Sendable>: @unchecked Sendable {
    // Sendable because `state` is reached only through `Held`, which exists only inside
    // `withLock`, with `mutex` held.
    private let mutex = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    private let condition = UnsafeMutablePointer<pthread_cond_t>.allocate(capacity: 1)
    private let state = UnsafeMutablePointer<State>.allocate(capacity: 1)

    package init(_ initial: State) {
        pthread_mutex_init(mutex, nil)
        var attributes = pthread_condattr_t()
        pthread_condattr_init(&attributes)
        pthread_condattr_setclock(&attributes, CLOCK_MONOTONIC)
        pthread_cond_init(condition, &attributes)
        pthread_condattr_destroy(&attributes)
        state.initialize(to: initial)
    }

    deinit {
        state.deinitialize(count: 1)
        state.deallocate()
        pthread_cond_destroy(condition)
        pthread_mutex_destroy(mutex)
        condition.deallocate()
        mutex.deallocate()
    }

    /// Access to the state while the mutex is held: valid only inside ``withLock(_:)``.
    ///
    /// Copyable (a `~Copyable` handle borrowed by the body crashes the 6.3 optimizer when it
    /// inlines `withLock`), but not `Sendable`.
    package struct Held {
        fileprivate let lock: ConditionLock

        /// The guarded state.
        package var state: State {
            @inline(__always) unsafeAddress { UnsafePointer(lock.state) }
            @inline(__always) nonmutating unsafeMutableAddress { lock.state }
        }

        /// Releases the mutex until a broadcast, then takes it again. Spurious wake-ups happen,
        /// so re-check the condition in a loop.
        package func wait() { pthread_cond_wait(lock.condition, lock.mutex) }

        /// Like ``wait()``, but gives up at `deadline` (nanoseconds of `CLOCK_MONOTONIC`);
        /// returns false once the deadline has passed.
        package func wait(untilNanoseconds deadline: UInt64) -> Bool {
            var spec = timespec(tv_sec: Int(deadline / 1_000_000_000), tv_nsec: Int(deadline % 1_000_000_000))
            return pthread_cond_timedwait(lock.condition, lock.mutex, &spec) != ETIMEDOUT
        }

        /// Runs `body` with the mutex released, and takes it again: for work a lock's holder
        /// hands out in order (``SerialLane``). The state may change meanwhile.
        package func unlocked(_ body: () -> Void) {
            pthread_mutex_unlock(lock.mutex)
            defer { pthread_mutex_lock(lock.mutex) }
            body()
        }

        /// Wakes one waiter (it runs once this holder releases the mutex): for waiters that are
        /// all alike, such as a pool's idle threads, of which one job needs one.
        @inline(__always) package func signal() { pthread_cond_signal(lock.condition) }

        /// Wakes every waiter (they run once this holder releases the mutex).
        @inline(__always) package func broadcast() { pthread_cond_broadcast(lock.condition) }
    }

    /// Runs `body` with the mutex held; `body` reaches the state through its handle.
    @inline(__always)
    package func withLock<T>(_ body: (Held) throws -> T) rethrows -> T {
        pthread_mutex_lock(mutex)
        defer { pthread_mutex_unlock(mutex) }
        return try body(Held(lock: self))
    }
}

/// `CLOCK_MONOTONIC` now, in nanoseconds: the clock of ``ConditionLock/Held/wait(untilNanoseconds:)``.
package func monotonicNanoseconds() -> UInt64 {
    var spec = timespec()
    clock_gettime(CLOCK_MONOTONIC, &spec)
    return UInt64(spec.tv_sec) * 1_000_000_000 + UInt64(spec.tv_nsec)
}

@available(*, unavailable, message: "the handle is valid only on the thread inside withLock")
extension ConditionLock.Held: Sendable {}

/// Names the calling thread for the kernel (`/proc/self/task/TID/comm`, `top -H`, `perf`):
/// Foundation's `Thread.name` does not reach it on Linux. `pthread_setname_np` is a GNU
/// extension the Glibc module does not import, so it is looked up by name; without it (not
/// glibc) the thread keeps its name. At most 15 bytes (the kernel's limit) are kept.
package func nameCurrentThread(_ name: String) {
    typealias SetName = @convention(c) (pthread_t, UnsafePointer<CChar>) -> Int32
    guard let process = dlopen(nil, RTLD_NOW) else { return }
    defer { dlclose(process) }
    guard let symbol = dlsym(process, "pthread_setname_np") else { return }
    let setName = unsafeBitCast(symbol, to: SetName.self)
    _ = setName(pthread_self(), String(name.utf8.prefix(15))!)
}
