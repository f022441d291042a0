import Synchronization

/// A continuation resumed at most once: by whichever of several racers comes first (an answer, a
/// timeout, a cancellation). Later calls do nothing.
///
/// ```swift
/// let value = await withCheckedContinuation { continuation in
///     let once = ResumeOnce(continuation)
///     Task { once.resume(returning: await work()) }
///     Task { try? await Task.sleep(for: .seconds(1)); once.resume(returning: nil) }
/// }
/// ```
///
/// The continuation is taken out under the lock and resumed outside it: resuming can run task
/// machinery that takes the task's status lock, while a cancellation handler holding that lock
/// calls back into `resume` (a lock-order deadlock otherwise).
package final class ResumeOnce<T: Sendable, Failure: Error>: Sendable {
    private let continuation: Mutex<CheckedContinuation<T, Failure>?>
    private let cleanup = Mutex<(@Sendable () -> Void)?>(nil)

    package init(_ continuation: CheckedContinuation<T, Failure>) {
        self.continuation = Mutex(continuation)
    }

    /// Runs once, right after the continuation is resumed (for example: cancel a timer). Set it
    /// before anything can resume.
    package var onResume: (@Sendable () -> Void)? {
        get { cleanup.withLock { $0 } }
        set { cleanup.withLock { $0 = newValue } }
    }

    /// True once the continuation was resumed.
    var isResumed: Bool { continuation.withLock { $0 == nil } }

    /// Resumes with `value` unless already resumed; returns whether this call resumed it.
    @discardableResult
    package func resume(returning value: T) -> Bool {
        guard let pending = take() else { return false }
        pending.resume(returning: value)
        finish()
        return true
    }

    /// Resumes by throwing `error` unless already resumed; returns whether this call resumed it.
    @discardableResult
    package func resume(throwing error: Failure) -> Bool {
        guard let pending = take() else { return false }
        pending.resume(throwing: error)
        finish()
        return true
    }

    /// Resumes with `result` unless already resumed; returns whether this call resumed it.
    @discardableResult
    package func resume(with result: Result<T, Failure>) -> Bool {
        switch result {
        case .success(let value): resume(returning: value)
        case .failure(let error): resume(throwing: error)
        }
    }

    private func take() -> CheckedContinuation<T, Failure>? {
        continuation.withLock { c in
            defer { c = nil }
            return c
        }
    }

    private func finish() {
        cleanup.withLock { c -> (@Sendable () -> Void)? in
            defer { c = nil }
            return c
        }?()
    }
}
