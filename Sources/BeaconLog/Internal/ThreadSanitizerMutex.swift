#if BEACON_TSAN
import Glibc

// Only in builds for ThreadSanitizer: `swift test --sanitize=thread -Xswiftc -DBEACON_TSAN`
// (README, Tests). One file, linked into every module that uses `Mutex`.
//
// Synchronization's `Mutex` hands a contended lock over in the kernel (a priority-inheritance
// futex, in its non-inlined slow paths), which ThreadSanitizer does not see: every access made
// under such a lock then looks like a race (about 1,400 warnings over the suite, all false). This
// `Mutex` has the same interface over a pthread mutex, which ThreadSanitizer intercepts, and
// shadows Synchronization's in the module it is compiled into, so what it reports is real.

/// Synchronization's `Mutex` for ThreadSanitizer builds: the same calls, over a pthread mutex.
struct Mutex<Value: ~Copyable>: ~Copyable, @unchecked Sendable {
    private let storage: ThreadSanitizerMutexStorage<Value>

    init(_ initialValue: consuming sending Value) {
        storage = ThreadSanitizerMutexStorage(initialValue)
    }

    borrowing func withLock<Result: ~Copyable, E: Error>(_ body: (inout sending Value) throws(E) -> sending Result) throws(E) -> sending Result {
        pthread_mutex_lock(storage.lock)
        defer { pthread_mutex_unlock(storage.lock) }
        return try body(&storage.value.pointee)
    }

    borrowing func withLockIfAvailable<Result: ~Copyable, E: Error>(_ body: (inout sending Value) throws(E) -> sending Result) throws(E) -> sending Result? {
        guard pthread_mutex_trylock(storage.lock) == 0 else { return nil }
        defer { pthread_mutex_unlock(storage.lock) }
        return try body(&storage.value.pointee)
    }
}

final class ThreadSanitizerMutexStorage<Value: ~Copyable> {
    let lock = UnsafeMutablePointer<pthread_mutex_t>.allocate(capacity: 1)
    let value = UnsafeMutablePointer<Value>.allocate(capacity: 1)

    init(_ initial: consuming Value) {
        pthread_mutex_init(lock, nil)
        value.initialize(to: initial)
    }

    deinit {
        value.deinitialize(count: 1)
        value.deallocate()
        pthread_mutex_destroy(lock)
        lock.deallocate()
    }
}
#endif
