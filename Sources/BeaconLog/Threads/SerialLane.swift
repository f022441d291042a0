/// Work run one call at a time, first in, first out, on a ``BlockingPool``'s threads (Beacon's
/// own, named and bounded): a serial queue without a thread of its own, in place of a serial
/// dispatch queue (whose threads libdispatch owns and may grow to 64 and more when they block).
///
/// ``async(_:)`` queues work and returns at once; the lane takes one pool thread while it has
/// work and gives it back when it has none. ``sync(_:)`` runs its work on the calling thread, in
/// its turn: after everything queued before it, and before anything queued after it.
///
/// A caller blocked in ``sync(_:)`` whose turn waits on work that has not started yet (the pool
/// is full, maybe of such callers) runs that work itself, on its own thread, in order: a lane
/// never needs a free pool thread to make progress, so it cannot deadlock on a full pool. Work on
/// a lane must not call ``sync(_:)`` on the same lane.
///
/// ```swift
/// let io = SerialLane()
/// io.async { try? log.sync() }
/// let opened = io.sync { connection.opened }
/// ```
package final class SerialLane: Sendable {
    private enum Item {
        case work(@Sendable () -> Void)
        /// A ``sync(_:)`` caller waiting for its turn, by ticket.
        case turn(UInt64)
    }

    private struct State: Sendable {
        var items = FIFO<Item>()
        /// A thread runs the lane's work now (a pool thread or a `sync` caller): no other may.
        var active = false
        /// A drain is queued on the pool and has not started.
        var drainQueued = false
        /// The `sync` caller whose turn came: it runs next.
        var granted: UInt64?
        var nextTicket: UInt64 = 0
    }

    private let pool: BlockingPool
    private let lock = ConditionLock(State())

    /// A lane running its work on `pool`'s threads.
    package init(pool: BlockingPool = .shared) {
        self.pool = pool
    }

    /// Queues `work`; it runs after everything queued before it, on one of the pool's threads.
    /// Returns at once.
    package func async(_ work: @escaping @Sendable () -> Void) {
        let drain = lock.withLock { held -> Bool in
            held.state.items.append(.work(work))
            // Someone runs the lane, or a drain is on its way, or a `sync` caller will run it.
            if held.state.active || held.state.drainQueued { return false }
            held.state.drainQueued = true
            return true
        }
        if drain { pool.submit { [self] in self.drain() } }
    }

    /// Runs `work` on the calling thread in its turn (after the work queued before it) and
    /// returns its result; the calling thread blocks meanwhile, so call it only from a thread
    /// that may block (never from Swift's cooperative pool).
    package func sync<T>(_ work: () throws -> T) rethrows -> T {
        let ticket = lock.withLock { held -> UInt64? in
            if !held.state.active && held.state.items.isEmpty {
                held.state.active = true
                return nil
            }
            held.state.nextTicket += 1
            held.state.items.append(.turn(held.state.nextTicket))
            return held.state.nextTicket
        }
        if let ticket { awaitTurn(ticket) }
        defer { endTurn() }
        return try work()
    }

    /// Blocks until `ticket`'s turn: granted by the thread running the work before it, or taken
    /// here by running that work on this thread when nobody runs it.
    private func awaitTurn(_ ticket: UInt64) {
        lock.withLock { held in
            while true {
                if held.state.granted == ticket {
                    held.state.granted = nil
                    return
                }
                if held.state.active {
                    held.wait()
                    continue
                }
                // Nobody runs the lane (its drain waits for a pool thread): run it here.
                held.state.active = true
                while let item = held.state.items.take() {
                    switch item {
                    case .work(let work):
                        held.unlocked(work)
                    case .turn(let other) where other == ticket:
                        return
                    case .turn(let other):
                        // Another caller's turn came first: it runs, this one waits again.
                        held.state.granted = other
                        held.broadcast()
                    }
                    if held.state.granted != nil { break }
                }
                if held.state.granted == nil { held.state.active = false }
            }
        }
    }

    /// The turn of a `sync` caller ended: the next item gets the lane.
    private func endTurn() {
        let drain = lock.withLock { held in handOn(held) }
        if drain { pool.submit { [self] in self.drain() } }
    }

    /// A pool thread's turn: runs the queued work in order until the lane is empty or a `sync`
    /// caller's turn comes.
    private func drain() {
        lock.withLock { held in
            held.state.drainQueued = false
            // A `sync` caller took the lane meanwhile; it hands it on when done.
            if held.state.active { return }
            held.state.active = true
            while case .work(let work)? = held.state.items.first {
                _ = held.state.items.take()
                held.unlocked(work)
            }
            // Empty, or a `sync` caller is next: give it the lane.
            _ = handOn(held)
        }
    }

    /// With the lane held by the caller: gives it to the next `sync` caller, or lets it go (and
    /// returns true if a drain must be queued for the work waiting).
    private func handOn(_ held: ConditionLock<State>.Held) -> Bool {
        switch held.state.items.first {
        case .turn(let ticket):
            _ = held.state.items.take()
            held.state.granted = ticket
            held.broadcast()
            return false
        case .work:
            held.state.active = false
            // A `sync` caller waiting behind this work may run it; else a drain does.
            held.broadcast()
            if held.state.drainQueued { return false }
            held.state.drainQueued = true
            return true
        case nil:
            held.state.active = false
            return false
        }
    }
}
