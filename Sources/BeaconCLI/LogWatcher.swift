import BeaconLog
import Glibc

/// Wakes `beacon send --follow` when the writer appends to the log, instead of every half second.
///
/// Watches the log directory with inotify (`inotify_init1`, `inotify_add_watch` for `IN_MODIFY`,
/// `IN_CREATE`, `IN_MOVED_TO` and `IN_CLOSE_WRITE`): an append to a segment or a new segment wakes
/// ``waitForAppend()``, which waits in `poll` on the inotify descriptor and
/// ``Interruption/fd`` together, so an idle sidecar sleeps without any periodic wakeup. Events for
/// other files (the checkpoint, `delivery.inflight`, `rejected.jsonl`, which `send` writes
/// itself) do not wake it. Where inotify is unavailable (no descriptors left, a kernel without it,
/// a file system that does not report changes) it falls back to looking every
/// ``fallbackInterval``.
///
/// ```swift
/// let watcher = LogWatcher(directory: dir)
/// while Interruption.signal == 0 {
///     watcher.reset()                // before the flush: an append during it wakes the next wait
///     flush()
///     watcher.waitForAppend()
/// }
/// ```
final class LogWatcher {
    /// How often the log is looked at without inotify.
    static let fallbackInterval: Duration = .milliseconds(500)

    /// The inotify descriptor, -1 without inotify.
    private let fd: Int32
    /// Why inotify is not used, for a diagnostic; nil when it is.
    let unavailable: String?
    private var buffer = [UInt8](repeating: 0, count: 16 << 10)

    init(directory: String) {
        let fd = inotify_init1(Int32(IN_NONBLOCK | IN_CLOEXEC))
        guard fd >= 0 else {
            self.fd = -1
            unavailable = "inotify_init1 failed: \(String(cString: strerror(errno)))"
            return
        }
        let mask = UInt32(IN_MODIFY) | UInt32(IN_CREATE) | UInt32(IN_MOVED_TO) | UInt32(IN_CLOSE_WRITE)
        guard inotify_add_watch(fd, directory, mask) >= 0 else {
            unavailable = "inotify_add_watch on \(directory) failed: \(String(cString: strerror(errno)))"
            close(fd)
            self.fd = -1
            return
        }
        self.fd = fd
        unavailable = nil
    }

    deinit {
        if fd >= 0 { close(fd) }
    }

    /// Forgets the changes seen so far: call it before a flush, which sees them all; a change
    /// during the flush wakes the next ``waitForAppend()``.
    func reset() {
        _ = readEvents()
    }

    /// Waits until the writer appends (since the last ``reset()``) or a signal arrives. Without
    /// inotify, waits ``fallbackInterval``.
    func waitForAppend() {
        guard fd >= 0 else {
            _ = Readiness.waitReadable([Interruption.fd], timeout: Self.fallbackInterval)
            return
        }
        while Interruption.signal == 0 && !readEvents() {
            let ready = Readiness.waitReadable([fd, Interruption.fd], timeout: nil)
            if ready.isEmpty || ready.contains(1) { return }
        }
    }

    /// Reads the queued events; whether any was about a segment (or the queue overflowed).
    private func readEvents() -> Bool {
        guard fd >= 0 else { return false }
        var appended = false
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fd, $0.baseAddress, $0.count) }
            if n < 0 && errno == EINTR { continue }
            guard n > 0 else { return appended }
            buffer.withUnsafeBytes { raw in
                var offset = 0
                // struct inotify_event: wd, mask, cookie, len (4 bytes each), then len bytes of name.
                while offset + 16 <= n {
                    let mask = raw.loadUnaligned(fromByteOffset: offset + 4, as: UInt32.self)
                    let length = Int(raw.loadUnaligned(fromByteOffset: offset + 12, as: UInt32.self))
                    let nameBytes = raw[(offset + 16)..<min(n, offset + 16 + length)].prefix { $0 != 0 }
                    if mask & UInt32(IN_Q_OVERFLOW) != 0 || SegmentName.parse(String(decoding: nameBytes, as: UTF8.self)) != nil {
                        appended = true
                    }
                    offset += 16 + length
                }
            }
        }
    }
}
