import Foundation
import Synchronization

/// A crash-safe FIFO of JSON records in one directory: an append-only, segmented JSON-lines log
/// with an acknowledged-position checkpoint.
///
/// Append records, read contiguous batches from the checkpoint, and acknowledge them once they
/// are delivered; acknowledged segments are deleted. The log survives `kill -9`, power loss (within
/// the loss window of its ``Durability``), torn and zero-filled tails and a full disk.
///
/// ```swift
/// let log = try BeaconLog(configuration: .init(directory: "/var/lib/app/events"))
/// try log.append(#"{"event":"Purchase"}"#)
/// let batch = try log.read(maxRecords: 50)
/// try log.acknowledge(through: batch.end)
/// ```
///
/// All methods are thread-safe. Appends are serialised into one user-space buffer and written with
/// one `write(2)` per group commit; reads and acknowledgements are serialised among themselves.
public final class BeaconLog: Sendable {
    let config: Configuration
    let fs: any FileSystem
    /// The log directory, opened once: every file of the log is reached through its descriptor.
    package let directory: LogDirectory
    /// This instance holds the writer lock and appends.
    let canWrite: Bool
    /// This instance holds the reader lock and may acknowledge.
    let canAcknowledge: Bool
    let locks: Mutex<[DirectoryLock]>
    // Lock order: writerIO, then checkpointIO, then readerIO, then state. Code holding one of them
    // may take only a later one (appending under writerIO reads state; quota deletion under
    // writerIO takes checkpointIO and readerIO to move the checkpoint), never an earlier one, or
    // two threads can deadlock.
    let state: Mutex<State>
    let writerIO: Mutex<WriterIO>
    let checkpointIO: Mutex<CheckpointIO>
    let readerIO: Mutex<ReaderIO>
    /// The group-commit flushes and the counter saves the timer (``TimerThread/shared``) starts:
    /// one at a time, in order, on Beacon's pool threads.
    let flushLane = SerialLane()
    /// Held by a counters save from its snapshot to its last write (taken before `state`).
    let countersSaving = Mutex(())

    /// Opens (or creates) the log in `configuration.directory`, recovering it after an unclean stop.
    ///
    /// Takes the `flock` locks that `configuration.access` calls for; throws
    /// ``BeaconLogError/Code/locked`` naming the holder's pid if another instance holds one.
    /// Opening reads only the checkpoint and the newest segment, so it costs the same with a
    /// gigabyte pending as with nothing.
    ///
    /// The directory is opened once (`O_DIRECTORY | O_NOFOLLOW`) and every file of the log is
    /// reached through that descriptor, never through a link: a symbolic link in place of the
    /// directory or of one of its files throws ``BeaconLogError/Code/linkedFile`` naming it. A
    /// directory others may write (or, unless ``Configuration/sharing`` is `.group`, its group,
    /// or owned by another user) throws ``BeaconLogError/Code/unsafeDirectory`` before any file
    /// in it is touched.
    public init(configuration: Configuration) throws {
        let fs = configuration.fileSystem
        var directory = configuration.directory
        while directory.count > 1 && directory.hasSuffix("/") { directory.removeLast() }
        guard !directory.isEmpty else {
            throw BeaconLogError(.invalidArgument, "the log directory path is empty; pass a directory such as /var/lib/app/beacon")
        }
        guard configuration.segmentBytes >= 4096 else {
            throw BeaconLogError(.invalidArgument, "segmentBytes is \(configuration.segmentBytes); use at least 4096", path: directory)
        }
        guard configuration.maxBytes >= 2 * Int64(configuration.segmentBytes) else {
            throw BeaconLogError(.invalidArgument, "maxBytes (\(configuration.maxBytes)) must be at least two segments (2 × segmentBytes = \(2 * configuration.segmentBytes)) so that the oldest segment can be dropped while the newest is written", path: directory)
        }
        guard configuration.maxRecordBytes > 0 else {
            throw BeaconLogError(.invalidArgument, "maxRecordBytes must be positive", path: directory)
        }
        if case .batched(let records, let interval) = configuration.durability {
            guard records > 0, interval > .zero else {
                throw BeaconLogError(.invalidArgument, "durability .batched needs records > 0 and interval > 0", path: directory)
            }
        }
        self.config = configuration
        self.fs = fs
        let logDirectory = LogDirectory(directory)
        self.directory = logDirectory
        let access = configuration.access
        self.canWrite = access == .readWrite || access == .write
        self.canAcknowledge = access == .readWrite || access == .read

        if access != .readOnly {
            try fs.makeDirectories(directory)
        }
        do {
            // The directory is opened here, once (O_DIRECTORY | O_NOFOLLOW), and checked before any file in it is touched.
            try BeaconLog.checkDirectorySafety(logDirectory, fs: fs, sharing: configuration.sharing)
        } catch let error as BeaconLogError where error.errno == ENOENT && access == .readOnly {
            throw BeaconLogError(.invalidArgument, "there is no log directory here; check the path", path: directory)
        }
        var held: [DirectoryLock] = []
        // A tracker of this process released without being closed may still be closing this
        // directory on its writer thread: its locks are free once that close ends.
        if canWrite || canAcknowledge { BackgroundCloses.waitUntilClosed(logDirectory.path) }
        do {
            if canWrite { held.append(try DirectoryLock.acquire(.writer, directory: logDirectory, fileSystem: fs)) }
            if canAcknowledge { held.append(try DirectoryLock.acquire(.reader, directory: logDirectory, fileSystem: fs)) }
        } catch {
            for lock in held { lock.release(fileSystem: fs) }
            throw BeaconLog.openingAdvice(error)
        }
        self.locks = Mutex(held)
        do {
            var recovered = try Recovery.open(directory: logDirectory, fs: fs, canWrite: canWrite, canAcknowledge: canAcknowledge)
            let counters = PersistedCounters.load(directory: logDirectory, fileSystem: fs)
            // The writer keeps the quota's own count; every other instance reports it less what
            // a reader delivered of it after all. An instance that is both nets it out once.
            recovered.state.stats.dropped = canWrite && !canAcknowledge ? counters.dropped : counters.reportedDropped
            if canWrite && canAcknowledge {
                recovered.state.countersDirty = counters.deliveredAfterDrop > 0 || counters.inDoubtAfterDrop > 0
            } else {
                recovered.state.deliveredAfterDrop = counters.deliveredAfterDrop
                recovered.state.inDoubtAfterDrop = counters.inDoubtAfterDrop
            }
            recovered.state.dropSettledThrough = counters.dropSettledThrough
            recovered.state.stats.refused = counters.refused
            recovered.state.stats.skippedCorrupt = counters.skippedCorrupt
            recovered.state.stats.skippedCorruptByReason = counters.skippedCorruptByReason
            if let through = counters.corruptCountedThrough, through.count == 2 {
                recovered.state.corruptCountedThrough = LogPosition(segment: through[0], offset: through[1], seq: 0)
            }
            self.state = Mutex(recovered.state)
            self.writerIO = Mutex(WriterIO())
            self.checkpointIO = Mutex(CheckpointIO(generation: recovered.generation, replaceCheckpointFile: recovered.damagedCheckpointSlot))
            self.readerIO = Mutex(ReaderIO())
        } catch {
            for lock in held { lock.release(fileSystem: fs) }
            throw BeaconLog.openingAdvice(error)
        }
    }

    /// `error` from opening the log's files, with what to do about it.
    static func openingAdvice(_ error: any Error) -> any Error {
        guard let error = error as? BeaconLogError, error.cause != nil else { return error }
        switch error.code {
        case .permissionDenied:
            return error.advising("the log directory and its files must belong to the user this process runs as (mode 0700): chown them, or choose another directory")
        case .diskFull:
            return error.advising("free space on the file system holding the log")
        case .io:
            return error.advising("the disk may be failing: check the kernel log (dmesg)")
        default:
            return error
        }
    }

    /// Opens (or creates) the log in `directory` with the default configuration.
    public convenience init(directory: String) throws {
        try self.init(configuration: Configuration(directory: directory))
    }

    deinit {
        try? close()
    }

    /// The configuration the log was opened with.
    public var configuration: Configuration { config }

    /// The acknowledged position: where the next ``read(from:maxRecords:maxBytes:)`` starts.
    public var checkpoint: LogPosition { state.withLock { $0.checkpoint } }

    /// Counters and sizes.
    public var stats: LogStats {
        state.withLock { s in
            var stats = s.stats
            stats.segments = s.segments.count
            stats.diskBytes = s.diskBytes
            stats.nextSeq = s.nextSeq
            let pendingFrom = max(s.checkpoint.seq, s.droppedBefore)
            stats.pendingRecords = s.nextSeq > pendingFrom ? s.nextSeq - pendingFrom : 0
            var pendingBytes: UInt64 = UInt64(s.bufferedBytes)
            for segment in s.segments where segment.number >= s.checkpoint.segment {
                pendingBytes += segment.number == s.checkpoint.segment ? segment.size - min(segment.size, s.checkpoint.offset) : segment.size
            }
            stats.pendingBytes = pendingBytes
            stats.acknowledgedSeq = s.checkpoint.seq > 0 ? s.checkpoint.seq - 1 : nil
            return stats
        }
    }

    /// Writes and fsyncs what is pending, releases the locks and closes the files. Later calls throw
    /// ``BeaconLogError/Code/closed``. Closing twice does nothing.
    ///
    /// If that last write or fsync fails (a full disk, an I/O error), `close()` throws and the log
    /// stays open, its records still in memory: call ``sync()`` or `close()` again once the disk
    /// accepts them. They are lost if the process exits first. If the log has failed (an fsync
    /// error that rewriting could not repair), it is closed and `close()` throws the failure, as
    /// does every later `close()`. It never returns normally for records that are not durable.
    public func close() throws {
        let (alreadyClosed, failure) = state.withLock { ($0.closed, $0.failure) }
        if alreadyClosed {
            if let failure { throw failure }
            return
        }
        if canWrite {
            do {
                try commit(sync: true)
            } catch {
                if let open = stillOpen(after: error) { throw open }
            }
        }
        state.withLock { $0.closed = true }
        saveCounters()
        // A lazily written checkpoint: durable now (best effort: if this fails, a power loss
        // delivers the batches it acknowledged again; none is lost).
        checkpointIO.withLock { io in try? makeCheckpointDurable(io: &io) }
        writerIO.withLock { io in
            // A failed log touches its files no more (the next open repairs the tail).
            if state.withLock({ $0.failure == nil }) { cutPreallocation(io: &io) }
            if let file = io.file { fs.close(file) }
            io.file = nil
        }
        releaseReaderAndLocks()
        if let failure = state.withLock({ $0.failure }) { throw failure }
    }

    /// Closes the log without writing what is buffered, for a process that is about to exit after
    /// ``close()`` failed: the records that are not durable are dropped, and bytes written since
    /// the last fsync are cut off the segment, so that what the directory holds is exactly what
    /// ``LogStats/durableSeq`` says is durable. Returns false if cutting them off failed (they may
    /// then be in the log, or not). Does nothing on a closed log.
    package func abandon() -> Bool {
        var exact = true
        let wasOpen = writerIO.withLock { io -> Bool in
            let wasOpen = state.withLock { s -> Bool in
                if s.closed { return false }
                s.closed = true
                s.chunks = []
                s.bufferedBytes = 0
                s.bufferedRecords = 0
                return true
            }
            guard wasOpen else { return false }
            if let file = io.file {
                let unsynced = UInt64(io.unsynced.reduce(0) { $0 + $1.bytes.count })
                if unsynced > 0 || io.preallocated {
                    do { try fs.truncate(file, to: io.fileSize - unsynced) } catch { exact = false }
                }
                fs.close(file)
            }
            io.file = nil
            io.unsynced = []
            return true
        }
        if wasOpen { releaseReaderAndLocks() }
        return exact
    }

    /// Closes the reader's files and releases the locks: the last step of closing.
    func releaseReaderAndLocks() {
        checkpointIO.withLock { io in
            if let file = io.checkpointFile { fs.close(file) }
            io.checkpointFile = nil
        }
        readerIO.withLock { io in
            if let file = io.readFile { closeSegment(file.file, io: &io) }
            io.readFile = nil
            for kept in io.keptForSync { closeSegment(kept.file, io: &io) }
            io.keptForSync = []
            io.cache = nil
        }
        locks.withLock { held in
            for lock in held { lock.release(fileSystem: fs) }
            held = []
        }
    }

    /// The error for a `close()` whose commit failed without failing the log: the records are still
    /// buffered, so the log stays open for a later `sync()` or `close()`. Nil if the log failed.
    func stillOpen(after error: any Error) -> BeaconLogError? {
        let (failed, waiting) = state.withLock { s in (s.failure != nil, s.nextSeq - min(s.nextSeq, s.durable.seq)) }
        if failed { return nil }
        var open = error as? BeaconLogError ?? BeaconLogError(.io, "\(error)", path: directory.path)
        let cause = open.failure ?? open.message
        open.failure = cause
        open.keptSeqs = nil
        open.message = "\(cause). The log is still open: its last \(waiting) records are not durable yet and stay in memory; call sync() or close() again once the disk accepts them (they are lost if the process exits first)"
        return open
    }

    func path(ofSegment number: UInt64) -> LogPath {
        directory.file(SegmentName.fileName(number))
    }

    /// Throws if the log is closed or failed.
    func checkUsable(_ s: State) throws {
        if s.closed { throw BeaconLogError(.closed, "the log is closed; open it again to use it", path: directory.path) }
        if let failure = s.failure { throw failure }
    }
}
