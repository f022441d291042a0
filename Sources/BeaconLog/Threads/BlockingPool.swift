import Foundation
import Glibc

/// Beacon's threads for one-off blocking work from async code (closing a tracker, waiting for the
/// writer thread; name lookups in a pool of their own): a fixed maximum of named threads, shared
/// by every tracker and uploader in the process, never a thread per call (as NIO's
/// `NIOThreadPool`).
///
/// A thread starts when work is queued and none is idle, up to ``maximumThreads``; beyond that
/// work waits its turn, first in, first out. A thread idle for ``idleTimeout`` ends, so a process
/// that stopped using Beacon keeps none. The threads are named `beacon-pool-N` for the kernel
/// (`top -H`, `/proc/PID/task/TID/comm`).
///
/// Work queued here must never wait for other work queued here (it may wait for the disk, the
/// writer thread, the name service): with every thread taken by such waiters, the work they wait
/// for would never run.
///
/// ```swift
/// BlockingPool.shared.submit { log.sync() }
/// let value = await BlockingPool.shared.run { try? log.sync() }
/// ```
package final class BlockingPool: Sendable {
    /// The pool every tracker and uploader shares.
    package static let shared = BlockingPool(name: "beacon-pool", maximumThreads: 8)
    /// Name lookups (`getaddrinfo`), apart: a lookup has a request's deadline, and must not wait
    /// behind closes and fsyncs (nor they behind a name service that does not answer).
    package static let lookups = BlockingPool(name: "beacon-dns", maximumThreads: 4)
    /// Network waits off `beacon-uploader` (a transport's requests from other threads, the
    /// collector probes), apart: a request may wait for a collector that never answers until its
    /// timeout, and the log's reads, acknowledgements and group commits must not queue behind it.
    package static let network = BlockingPool(name: "beacon-net", maximumThreads: 8)

    /// The most threads this pool runs at once.
    package let maximumThreads: Int
    /// How long an idle thread waits for work before it ends.
    package let idleTimeout: Duration
    private let name: String
    private let lock: ConditionLock<State>

    private struct State: Sendable {
        var jobs = FIFO<@Sendable () -> Void>()
        var threads = 0
        var idle = 0
        var started = 0
    }

    package init(name: String, maximumThreads: Int, idleTimeout: Duration = .seconds(30)) {
        precondition(maximumThreads > 0, "a pool needs at least one thread")
        self.name = name
        self.maximumThreads = maximumThreads
        self.idleTimeout = idleTimeout
        self.lock = ConditionLock(State())
    }

    /// Threads running now (busy or idle), for tests and the thread table in DESIGN.md.
    package var threadCount: Int { lock.withLock { $0.state.threads } }

    /// Queues `job`; it runs on one of the pool's threads. Returns at once.
    package func submit(_ job: @escaping @Sendable () -> Void) {
        let number = lock.withLock { held -> Int? in
            held.state.jobs.append(job)
            let waiting = held.state.jobs.count
            if held.state.idle >= waiting {
                held.signal()
                return nil
            }
            if held.state.idle > 0 { held.signal() }
            guard held.state.threads < maximumThreads else { return nil }
            held.state.threads += 1
            held.state.started += 1
            return (held.state.started - 1) % maximumThreads + 1
        }
        guard let number else { return }
        let threadName = "\(name)-\(number)"
        let thread = Thread { [self] in
            nameCurrentThread(threadName)
            work()
        }
        thread.name = threadName
        thread.start()
    }

    /// Runs `work` on the pool and returns its result, suspending (not blocking) the calling task.
    package func run<T: Sendable>(_ work: @escaping @Sendable () -> T) async -> T {
        await withCheckedContinuation { continuation in
            submit { continuation.resume(returning: work()) }
        }
    }

    private func work() {
        let idleNanoseconds = UInt64(max(0, idleTimeout.nanoseconds))
        while true {
            let job = lock.withLock { held -> (@Sendable () -> Void)? in
                let until = monotonicNanoseconds() + idleNanoseconds
                while true {
                    if let job = held.state.jobs.take() { return job }
                    held.state.idle += 1
                    let woken = held.wait(untilNanoseconds: until)
                    held.state.idle -= 1
                    if !woken, monotonicNanoseconds() >= until, held.state.jobs.isEmpty {
                        held.state.threads -= 1
                        return nil
                    }
                }
            }
            guard let job else { return }
            job()
        }
    }
}

/// A first-in, first-out queue for the threads' jobs: an array read from a moving head, emptied
/// (its storage kept while small) when the head reaches its end.
struct FIFO<Element> {
    private var elements: [Element] = []
    private var head = 0

    /// How many are queued.
    var count: Int { elements.count - head }
    var isEmpty: Bool { head == elements.count }
    /// The next one out, left in place.
    var first: Element? { head < elements.count ? elements[head] : nil }

    mutating func append(_ element: Element) { elements.append(element) }

    /// Takes the next one out.
    mutating func take() -> Element? {
        guard head < elements.count else { return nil }
        let element = elements[head]
        head += 1
        if head == elements.count {
            elements.removeAll(keepingCapacity: elements.count <= 64)
            head = 0
        }
        return element
    }
}

extension FIFO: Sendable where Element: Sendable {}
