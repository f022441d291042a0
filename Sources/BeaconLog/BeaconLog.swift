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
public final class BeaconLog: Sendable {
    /// Opens (or creates) the log in `configuration.directory`, recovering it after an unclean stop.
    ///
    /// Takes the `flock` locks that `configuration.access` calls for; throws
    /// ``BeaconLogError/Code/locked`` naming the holder's pid if another instance holds one.
    /// Opening reads only the checkpoint and the newest segment, so it costs the same with a
    /// gigabyte pending as with nothing.
    public init(configuration: Configuration) throws { fatalError("not yet") }

    /// Opens (or creates) the log in `directory` with the default configuration.
    public convenience init(directory: String) throws {
        try self.init(configuration: Configuration(directory: directory))
    }

    /// The configuration the log was opened with.
    public var configuration: Configuration { fatalError("not yet") }

    /// Appends one record, the UTF-8 bytes of one JSON value, and returns its sequence number.
    ///
    /// The record must not be empty, must not contain a raw newline and must not be larger than
    /// `maxRecordBytes`. It is durable when this returns under `.everyRecord`, and at the next group
    /// commit otherwise (see ``sync()``).
    @discardableResult
    public func append(_ record: some Collection<UInt8>) throws -> UInt64 { fatalError("not yet") }

    /// Appends one record given as a JSON string.
    @discardableResult
    public func append(_ record: String) throws -> UInt64 { try append(record.utf8) }

    /// Appends several records in order with at most one group commit; returns their sequence numbers.
    ///
    /// Either every record is accepted or none is (an invalid record is reported before any is written).
    @discardableResult
    public func append(contentsOf records: [[UInt8]]) throws -> Range<UInt64> { fatalError("not yet") }

    /// Writes and fsyncs everything appended so far. Returns when it is durable.
    public func sync() throws { fatalError("not yet") }

    /// Reads up to `maxRecords` records (and about `maxBytes` of event bytes, at least one record)
    /// starting at `position`, or at the checkpoint when `position` is nil. Never moves the checkpoint.
    ///
    /// Returns an empty batch when nothing is pending. Corrupt records are passed over and counted.
    public func read(from position: LogPosition? = nil, maxRecords: Int = 50, maxBytes: Int = 1 << 20) throws -> LogBatch { fatalError("not yet") }

    /// Advances the checkpoint to `position` (normally `batch.end`) durably, then deletes segments
    /// that are wholly acknowledged.
    ///
    /// Makes the acknowledged records durable first if they are not yet, so the checkpoint never
    /// points past synced data. Acknowledging a position at or before the checkpoint does nothing.
    public func acknowledge(through position: LogPosition) throws { fatalError("not yet") }

    /// The acknowledged position: where the next ``read(from:maxRecords:maxBytes:)`` starts.
    public var checkpoint: LogPosition { fatalError("not yet") }

    /// Counters and sizes.
    public var stats: LogStats { fatalError("not yet") }

    /// Writes and fsyncs what is pending, releases the locks and closes the files. Later calls throw
    /// ``BeaconLogError/Code/closed``. Closing twice does nothing.
    public func close() throws { fatalError("not yet") }
}
