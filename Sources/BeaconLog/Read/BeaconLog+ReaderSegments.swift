import Glibc

/// The segments a reader has open and the segment list it reads by: the descriptor of the
/// segment being read, those kept for an acknowledgement's fsync, and the list as another
/// process's writer rolls and its quota deletes.
extension BeaconLog {
    /// Makes segment `number` the one being read and returns its descriptor: the one already
    /// open, one kept for an acknowledgement's fsync, or a new one. Nil if the file is gone (then
    /// the segment list is listed again before it is trusted).
    func readingFile(_ number: UInt64, io: inout ReaderIO) throws -> LogFile? {
        if let current = io.readFile, current.segment == number { return current.file }
        if let previous = io.readFile { leave(previous, io: &io) }
        io.readFile = nil
        if let kept = io.keptForSync.firstIndex(where: { $0.segment == number }) {
            io.readFile = io.keptForSync.remove(at: kept)
        } else {
            do {
                io.readFile = SegmentFile(segment: number, file: try fs.open(path(ofSegment: number), .read))
            } catch let error as BeaconLogError where error.errno == ENOENT {
                io.segmentsStale = true
                return nil
            }
        }
        return io.readFile?.file
    }

    /// How many descriptors of segments read but not yet fsynced a `.read` instance keeps open;
    /// beyond that the oldest is closed, and the acknowledgement opens it again to fsync it.
    static let keptForSyncLimit = 4

    /// Closes the descriptor of a segment that reading moves off, or, for a `.read` instance, keeps
    /// it for the next acknowledgement if records read from it may not be fsynced yet.
    func leave(_ segment: SegmentFile, io: inout ReaderIO) {
        let mayNeedSync = !canWrite && canAcknowledge && segment.segment >= (io.syncedThrough ?? state.withLock { $0.checkpoint }).segment
        guard mayNeedSync else {
            closeSegment(segment.file, io: &io)
            return
        }
        io.keptForSync.append(segment)
        if io.keptForSync.count > Self.keptForSyncLimit { closeSegment(io.keptForSync.removeFirst().file, io: &io) }
    }

    /// Closes a reader's segment descriptor, or, while an acknowledgement fsyncs it without the
    /// reader lock, leaves that to the acknowledgement (`ReaderIO.closeAfterSync`).
    func closeSegment(_ file: LogFile, io: inout ReaderIO) {
        if io.syncing.contains(where: { $0 === file }) {
            io.closeAfterSync.append(file)
        } else {
            fs.close(file)
        }
    }

    /// Closes the reader's descriptors of segment `number` (about to be deleted) and drops its cache.
    func closeReader(ofSegment number: UInt64, io: inout ReaderIO) {
        if let current = io.readFile, current.segment == number {
            closeSegment(current.file, io: &io)
            io.readFile = nil
        }
        for kept in io.keptForSync where kept.segment == number { closeSegment(kept.file, io: &io) }
        io.keptForSync.removeAll { $0.segment == number }
        if io.cache?.segment == number { io.cache = nil }
    }

    /// The next segment after `number`, or nil if `number` is the newest.
    ///
    /// When another process writes, the segments listed last are trusted without listing the
    /// directory again: a writer numbers every new segment above all existing ones, so no segment
    /// can appear between `number` and a newer one already listed. The directory is listed only
    /// when none newer is known (reading has reached the newest segment it knows) or a listed
    /// segment was gone when opened (a quota drop deleted it).
    func segment(after number: UInt64, io: inout ReaderIO) throws -> UInt64? {
        func known() -> UInt64? { state.withLock { s in s.segments.first { $0.number > number }?.number } }
        if canWrite { return known() }
        if !io.segmentsStale, let next = known() { return next }
        try refreshSegments(io: &io)
        return known()
    }

    /// Lists the directory again when another process appends (it may have rolled or deleted segments).
    ///
    /// Only the sizes that may have changed are looked up: a segment that had a newer one when
    /// it was listed before was complete then (a writer finishes a segment before it creates the
    /// next), so the size found then is final.
    func refreshSegments(io: inout ReaderIO) throws {
        let sealed = state.withLock { s in
            Dictionary(s.segments.dropLast().map { ($0.number, $0.size) }, uniquingKeysWith: { first, _ in first })
        }
        var segments: [SegmentInfo] = []
        for number in try fs.list(directory).compactMap(SegmentName.parse).sorted() {
            if let size = try sealed[number] ?? fs.fileSize(path(ofSegment: number)) {
                segments.append(SegmentInfo(number: number, size: size))
            }
        }
        io.segmentsStale = false
        state.withLock { s in
            s.segments = segments
            if let newest = segments.last, newest.number >= s.written.segment {
                s.written = LogPosition(segment: newest.number, offset: newest.size, seq: s.written.seq)
            }
        }
    }
}
