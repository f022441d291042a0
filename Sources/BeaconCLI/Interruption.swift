import Beacon
import BeaconHTTP
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

    /// Readable once a signal was received (the handler writes a byte to it and nothing reads it
    /// back): a thread waiting in `poll` for something else wakes on the signal too, however it
    /// was delivered. -1 before ``install()``.
    static var fd: Int32 { interruptionPipe.load(ordering: .relaxed) }

    /// Installs the handlers for SIGINT and SIGTERM and unblocks them. Call it on the main thread
    /// before the log starts other threads, so that they inherit the unblocked mask.
    static func install() {
        interruptionMainThread.store(pthread_self(), ordering: .relaxed)
        if interruptionPipe.load(ordering: .relaxed) < 0 {
            let pipe = SocketWaker()
            interruptionPipe.store(pipe.fd, ordering: .relaxed)
            interruptionPipeWriteEnd.store(pipe.writeEnd, ordering: .relaxed)
            interruptionPipeOwner = pipe
        }
        for number in [SIGINT, SIGTERM] {
            var action = sigaction()
            action.__sigaction_handler.sa_handler = { number in
                interruptionReceived.store(number, ordering: .relaxed)
                var one: UInt8 = 1
                _ = write(interruptionPipeWriteEnd.load(ordering: .relaxed), &one, 1)
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
/// The pipe a signal wakes (see ``Interruption/fd``); both ends stay open for the process's life.
private let interruptionPipe = Atomic<Int32>(-1)
private let interruptionPipeWriteEnd = Atomic<Int32>(-1)
nonisolated(unsafe) private var interruptionPipeOwner: SocketWaker?
