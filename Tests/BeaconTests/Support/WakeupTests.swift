import Synchronization
import Testing
@testable import Beacon
import BeaconTesting

/// ``Wakeup``: the delivery loop's wait between passes. With the system's clock its deadline is an
/// entry on Beacon's timer thread, not a sleeping task: each way a wait can end (signal, deadline,
/// cancellation, a signal kept from before) ends it once, and a deadline never outlives its wait.
// Three minutes: each wait is short, but a test polls up to 30 s twice for its tasks to run, and
// the AddressSanitizer suite on a loaded 2-core machine once took 80 s for one of them.
@Suite("Wakeup: waits with a deadline on the timer thread", .timeLimit(.minutes(3)))
struct WakeupTests {
    let time = MonotonicTime(ContinuousClock())

    /// Polls `condition` every millisecond, for at most 30 s by the clock (a loaded machine is
    /// slow, not wrong; a count of 1 ms sleeps took 76 s once on CI's loaded machine), and not
    /// once the task is cancelled (its sleeps would return at once: a spin on the pool).
    func eventually(_ condition: () -> Bool) async {
        let end = ContinuousClock.now + .seconds(30)
        while !condition(), ContinuousClock.now < end {
            guard (try? await Task.sleep(for: .milliseconds(1))) != nil else { return }
        }
    }

    @Test("the system's clock waits on the timer thread, a test clock on a sleeping task")
    func whichWay() {
        #expect(MonotonicTime(ContinuousClock()).isSystemClock)
        #expect(MonotonicTime(SuspendingClock()).isSystemClock)
        #expect(!MonotonicTime(ManualClock()).isSystemClock)
    }

    @Test("the deadline ends the wait, not before it, and leaves no entry")
    func deadlineEnds() async {
        let wakeup = Wakeup()
        let start = time.now()
        await wakeup.wait(until: start + .milliseconds(50), time: time)
        #expect(time.now() - start >= .milliseconds(50))
        #expect(!wakeup.hasDeadline)
        #expect(!wakeup.isSignalled)
    }

    @Test("a deadline already passed returns at once")
    func deadlinePassed() async {
        let wakeup = Wakeup()
        await wakeup.wait(until: time.now() - .seconds(1), time: time)
        #expect(!wakeup.hasDeadline)
    }

    @Test("a signal ends the wait before its deadline and removes the deadline")
    func signalEnds() async {
        let wakeup = Wakeup()
        let done = Atomic(false)
        let waiting = Task {
            await wakeup.wait(until: time.now() + .seconds(60), time: time)
            done.store(true, ordering: .sequentiallyConsistent)
        }
        await eventually { wakeup.hasDeadline }
        #expect(wakeup.hasDeadline)
        wakeup.signal()
        await waiting.value
        let ended = done.load(ordering: .sequentiallyConsistent)
        #expect(ended)
        #expect(!wakeup.hasDeadline)
        #expect(!wakeup.isSignalled, "the signal was taken by the wait, not kept")
    }

    @Test("a signal given before the wait is kept and ends it at once")
    func signalKept() async {
        let wakeup = Wakeup()
        wakeup.signal()
        #expect(wakeup.isSignalled)
        await wakeup.wait(until: time.now() + .seconds(60), time: time)
        #expect(!wakeup.isSignalled)
        #expect(!wakeup.hasDeadline)
    }

    @Test("cancelling the waiting task ends the wait")
    func cancelEnds() async {
        let wakeup = Wakeup()
        let waiting = Task { await wakeup.wait(until: time.now() + .seconds(60), time: time) }
        await eventually { wakeup.hasDeadline }
        waiting.cancel()
        await waiting.value
        #expect(!wakeup.hasDeadline)
    }

    /// The first wait's deadline passes while a second wait runs: it must not end the second.
    @Test("an earlier wait's deadline does not end a later wait")
    func staleDeadline() async {
        let wakeup = Wakeup()
        let firstDeadline = time.now() + .seconds(1)
        let firstEnded = Atomic(false)
        let first = Task {
            await wakeup.wait(until: firstDeadline, time: time)
            firstEnded.store(true, ordering: .sequentiallyConsistent)
        }
        // A task that starts after its deadline (a loaded machine) returns without one.
        await eventually { wakeup.hasDeadline || firstEnded.load(ordering: .sequentiallyConsistent) }
        wakeup.signal()
        await first.value
        // On a loaded machine the first wait may have ended at its deadline before the signal,
        // which is then kept: take it, so that the second wait starts clean.
        if wakeup.isSignalled { await wakeup.wait() }
        let ended = Atomic(false)
        let second = Task {
            await wakeup.wait(until: time.now() + .seconds(60), time: time)
            ended.store(true, ordering: .sequentiallyConsistent)
        }
        await eventually { wakeup.hasDeadline }
        // Past the first wait's deadline, whose entry (if it outlived its wait) would end this one.
        while time.now() < firstDeadline + .milliseconds(200) {
            guard (try? await Task.sleep(for: .milliseconds(50))) != nil else { break }  // cancelled: no spin
        }
        let endedEarly = ended.load(ordering: .sequentiallyConsistent)
        #expect(!endedEarly, "the first wait's deadline ended the second")
        wakeup.signal()
        await second.value
        let endedAtLast = ended.load(ordering: .sequentiallyConsistent)
        #expect(endedAtLast)
    }

    /// Many waits ended every way in turn leave no entry behind on the timer.
    @Test("waits ended by signals and deadlines in turn leave no deadline behind")
    func manyWaits() async {
        let wakeup = Wakeup()
        for k in 0..<200 {
            if k % 2 == 0 {
                await wakeup.wait(until: time.now() + .microseconds(200), time: time)
            } else {
                let waiting = Task { await wakeup.wait(until: time.now() + .seconds(60), time: time) }
                if k % 4 == 1 { await eventually { wakeup.hasDeadline } }
                wakeup.signal()
                await waiting.value
            }
            #expect(!wakeup.hasDeadline, "wait \(k)")
        }
        #expect(!wakeup.isSignalled)
    }
}
