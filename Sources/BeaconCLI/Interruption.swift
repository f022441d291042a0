import Glibc
import Synchronization

/// SIGINT and SIGTERM as a request to stop cleanly, for commands that must not lose what they
/// have read (`beacon append`).
///
/// ``install()`` sets handlers with `sigaction` *without* `SA_RESTART`, so a blocking `read(2)`
/// on the main thread returns `EINTR`; the command then checks ``signal`` and finishes its work
/// instead of dying with records only in memory. A signal delivered to another thread (the log's
/// flush queue) is forwarded to the main thread with `pthread_kill`. Check ``signal`` before each
/// blocking read: a signal that lands between the check and the read is seen at the next one
/// (or on a second Ctrl-C).
enum Interruption {
    /// The signal received, or 0.
    static var signal: Int32 { interruptionReceived.load(ordering: .relaxed) }

    /// Installs the handlers for SIGINT and SIGTERM and unblocks them. Call it on the main thread
    /// before the log starts other threads, so that they inherit the unblocked mask.
    static func install() {
        interruptionMainThread.store(pthread_self(), ordering: .relaxed)
        for number in [SIGINT, SIGTERM] {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = { number in
                interruptionReceived.store(number, ordering: .relaxed)
                let main = interruptionMainThread.load(ordering: .relaxed)
                if pthread_equal(pthread_self(), main) == 0 { pthread_kill(main, number) }
            }
            sigemptyset(&action.sa_mask)
            action.sa_flags = 0  // no SA_RESTART: interrupt the read
            sigaction(number, &action, nil)
        }
        // A parent may have started us with these signals blocked (the mask is inherited across exec).
        var unblock = sigset_t()
        sigemptyset(&unblock)
        sigaddset(&unblock, SIGINT)
        sigaddset(&unblock, SIGTERM)
        pthread_sigmask(SIG_UNBLOCK, &unblock, nil)
    }
}

/// Set from the signal handler (atomic stores and `pthread_kill` are async-signal-safe).
private let interruptionReceived = Atomic<Int32>(0)
/// The thread that reads and must be woken.
private let interruptionMainThread = Atomic<UInt>(0)
