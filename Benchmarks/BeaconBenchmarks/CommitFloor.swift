import Foundation
import Glibc

/// The physical limit of a paced writer on this machine, measured beside it: what its commits
/// alone cost when nothing else runs. One thread writes `bytesPerCommit` bytes and syncs them (`fdatasync`, as the writer does),
/// `commitsPerSecond` times a second (sleeping between commits, as the writer gathers), into a file
/// whose next megabyte is zeroed ahead, as a segment's is; its CPU time and voluntary context
/// switches per commit (`getrusage(RUSAGE_THREAD)`: the sleep's wakeup and the disk's waits inside
/// `pwrite` and `fdatasync`) are what any design making that many durable commits pays here.
///
/// On a VM, a commit after a pause costs several times one made back to back (`GAP_US` in
/// `Benchmarks/sync-cost.sh` shows the curve): measured at the writer's own pace, the floor is
/// the one its figures compare with.
struct CommitFloor {
    var cpuMicrosecondsPerCommit = 0.0
    var switchesPerCommit = 0.0
    var commits = 0

    static func measure(commitsPerSecond: Double, bytesPerCommit: Int, seconds: Double, directory: String) throws -> CommitFloor {
        guard commitsPerSecond > 0 else { return CommitFloor() }
        let path = directory + "/floor.jsonl"
        let fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0o644)
        guard fd >= 0 else { throw BenchFailure("paced floor: cannot create \(path): \(String(cString: strerror(errno)))") }
        defer {
            close(fd)
            unlink(path)
        }
        let period = UInt64(1e9 / commitsPerSecond)
        let count = max(1, Int(commitsPerSecond * seconds))
        // The sleeps, writes and syncs run on a thread of their own, measured alone.
        let outcome = Outcome()
        let done = DispatchSemaphore(value: 0)
        let thread = Thread {
            defer { done.signal() }
            let window = 1 << 20
            let zeros = [UInt8](repeating: 0, count: window)
            let record = [UInt8](repeating: UInt8(ascii: "x"), count: max(bytesPerCommit, 1))
            var zeroed = 0, offset = 0
            let (cpu0, switches0) = threadUsage()
            var next = PacedPhase.monotonicNanoseconds() + period
            for _ in 0..<count {
                PacedPhase.sleep(untilNanoseconds: next)
                next += period
                if offset + record.count > zeroed {
                    guard pwrite(fd, zeros, window, off_t(zeroed)) == window else { outcome.failure = "pwrite zeros: \(String(cString: strerror(errno)))"; return }
                    zeroed += window
                }
                guard pwrite(fd, record, record.count, off_t(offset)) == record.count else { outcome.failure = "pwrite: \(String(cString: strerror(errno)))"; return }
                offset += record.count
                guard fdatasync(fd) == 0 else { outcome.failure = "fdatasync: \(String(cString: strerror(errno)))"; return }
            }
            let (cpu1, switches1) = threadUsage()
            outcome.floor = CommitFloor(cpuMicrosecondsPerCommit: (cpu1 - cpu0) / Double(count) * 1e6,
                                        switchesPerCommit: Double(switches1 - switches0) / Double(count), commits: count)
        }
        thread.start()
        done.wait()
        if let failure = outcome.failure { throw BenchFailure("paced floor: \(failure) on \(path)") }
        return outcome.floor
    }

    /// What the measuring thread hands back (read after it signalled).
    private final class Outcome: @unchecked Sendable {
        var floor = CommitFloor()
        var failure: String?
    }

    /// The calling thread's CPU seconds and voluntary context switches.
    static func threadUsage() -> (Double, Int) {
        var usage = rusage()
        getrusage(__rusage_who_t(1), &usage)  // RUSAGE_THREAD (1): Glibc does not import it
        let cpu = Double(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) + Double(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6
        return (cpu, usage.ru_nvcsw)
    }
}
