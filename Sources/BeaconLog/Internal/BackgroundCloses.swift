import Glibc
import Synchronization

/// Logs of this process being closed on a thread of Beacon's own, without anyone waiting: a
/// tracker released without being closed hands its close to its writer thread, so that the
/// thread dropping the last reference (a cooperative thread, maybe) never waits for an fsync.
///
/// Until that close ends, the directory's locks are held. An open of the same directory in this
/// process waits for it (up to a minute) instead of failing with ``BeaconLogError/Code/locked``,
/// and so does the process's exit (up to 10 s), so that the events tracked are on disk.
///
/// ```swift
/// BackgroundCloses.began(log.directory.path)
/// // ... on the closing thread: try log.close(); BackgroundCloses.ended(path)
/// ```
package enum BackgroundCloses {
    private static let closing = Mutex<[String: Int]>([:])
    private static let exitHookInstalled = Atomic<Bool>(false)

    /// A close of the log in `directory` (its path as the log keeps it) began on another thread.
    package static func began(_ directory: String) {
        closing.withLock { $0[key(directory), default: 0] += 1 }
        if !exitHookInstalled.exchange(true, ordering: .acquiringAndReleasing) {
            // Runs during exit(3), after main returns: waits for the closes still running.
            atexit { BackgroundCloses.waitForAll(timeout: 10) }
        }
    }

    /// That close ended: the directory's locks are released.
    package static func ended(_ directory: String) {
        closing.withLock { pending in
            let key = key(directory)
            let left = (pending[key] ?? 1) - 1
            pending[key] = left > 0 ? left : nil
        }
    }

    /// Whether a close of `directory` runs in the background now.
    package static func isClosing(_ directory: String) -> Bool {
        closing.withLock { $0[key(directory)] != nil }
    }

    /// Waits (polling every 2 ms) until no close of `directory` runs in the background, or
    /// `timeout` seconds passed.
    package static func waitUntilClosed(_ directory: String, timeout: Double = 60) {
        wait(timeout: timeout) { isClosing(directory) }
    }

    static func waitForAll(timeout: Double) {
        wait(timeout: timeout) { closing.withLock { !$0.isEmpty } }
    }

    private static func wait(timeout: Double, while busy: () -> Bool) {
        let limit = Int(timeout * 500)
        var waited = 0
        while busy(), waited < limit {
            usleep(2_000)
            waited += 1
        }
    }

    private static func key(_ directory: String) -> String {
        var trimmed = directory
        while trimmed.count > 1 && trimmed.hasSuffix("/") { trimmed.removeLast() }
        return trimmed
    }
}
