import BeaconLog

/// Reading ahead: while a request is in flight, the next batch is read and its body built (and
/// gzipped), so that the next request goes out as soon as the answer is in. With one request in
/// flight, the time between an answer and the next request is what delivery adds to its HTTP
/// client's own rate; reading a batch and building its body are most of it.
extension Uploader {
    /// The batch after the one in flight, being read (or read) on the I/O queue.
    struct ReadAhead: Sendable {
        /// The seq of its first record: it is used only if the next batch starts there.
        var firstSeq: UInt64
        /// The records asked for: it is used only if the next batch would ask for as many.
        var maxRecords: Int
        var read: Started<Prepared?>
    }

    /// A batch read ahead and its payload (nil when the read failed: the next read reports it).
    struct Prepared: Sendable {
        var batch: LogBatch
        var payload: RequestBuilder.Payload
    }

    /// Starts reading the batch after `session`'s, unless it is read already: only while a backlog
    /// waits (a whole batch beyond this one) and, when this process writes the log, far from its
    /// quota (``canOverlap(after:waiting:stats:)``).
    func startReadAhead(after session: Session) {
        let from = session.batch.end
        guard readAhead?.firstSeq != from.seq else { return }
        let stats = log.stats
        let wanted = configuration.eventsPerRequest(pending: stats.pendingRecords)
        // A backlog: more than a batch beyond this one (a catch-up batch reads what is there).
        guard canOverlap(after: session, waiting: min(wanted, configuration.batchSize + 1), stats: stats) else { return }
        let log = self.log, requests = self.requests, bytes = configuration.maxBatchBytes
        let work = { @Sendable () -> Prepared? in
            guard let batch = try? log.read(from: from, maxRecords: wanted, maxBytes: bytes), !batch.isEmpty else { return nil }
            return Prepared(batch: batch, payload: requests.payload(records: batch.records, seqs: batch.seqs, crcs: batch.crcs))
        }
        // On the pass's own thread, while the request's answer is awaited; else on the I/O queue.
        let read = Started<Prepared?>()
        if !IOThread.deferUntilWaiting({ read.finish(work()) }) {
            ioQueue.start(work, into: read)
        }
        readAhead = ReadAhead(firstSeq: from.seq, maxRecords: wanted, read: read)
    }

    /// The batch read ahead, if it is the one to read from `seq` now with `maxRecords`; any other is dropped.
    func takeReadAhead(from seq: UInt64, maxRecords: Int) async -> Prepared? {
        guard let ahead = readAhead else { return nil }
        readAhead = nil
        IOThread.runDeferred()
        guard let prepared = await ahead.read.value, ahead.firstSeq == seq, ahead.maxRecords == maxRecords else { return nil }
        return prepared
    }

    /// Waits for a read ahead still running and drops it: a pass leaves nothing behind.
    func dropReadAhead() async {
        guard let ahead = readAhead else { return }
        readAhead = nil
        IOThread.runDeferred()
        _ = await ahead.read.value
    }
}
