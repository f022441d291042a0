/// Why `append` refused a record: the key of ``LogStats/refused``.
///
/// Compare with the static reasons; the set may grow in a later version, so keep a default case.
/// Only the library makes reasons.
///
/// ```swift
/// let tooLarge = log.stats.refused[.recordTooLarge, default: 0]
/// ```
public struct RefusalReason: Hashable, Sendable, CustomStringConvertible {
    private enum Kind: String, CaseIterable, Sendable {
        case invalidRecord, recordTooLarge, quotaExceeded, diskFull
    }

    private let kind: Kind
    private init(_ kind: Kind) { self.kind = kind }

    /// The record was empty or held a raw newline (``BeaconLogError/Code/invalidRecord``).
    public static let invalidRecord = RefusalReason(.invalidRecord)
    /// The record was larger than `maxRecordBytes` (``BeaconLogError/Code/recordTooLarge``).
    public static let recordTooLarge = RefusalReason(.recordTooLarge)
    /// The quota (`maxBytes`) was reached under `.rejectNew` (``BeaconLogError/Code/quotaExceeded``).
    public static let quotaExceeded = RefusalReason(.quotaExceeded)
    /// The disk is full and enough records already wait in memory (``BeaconLogError/Code/diskFull``).
    public static let diskFull = RefusalReason(.diskFull)

    /// A stable identifier without spaces, for metric labels and JSON: `"recordTooLarge"`.
    public var name: String { kind.rawValue }

    public var description: String { name }

    /// What happened, for people, and what to do about it.
    public var explanation: String {
        switch kind {
        case .invalidRecord:
            "the record was empty or held a raw newline; append the bytes of one JSON value, with newlines escaped"
        case .recordTooLarge:
            "the record was larger than maxRecordBytes; split it or raise the limit"
        case .quotaExceeded:
            "the log reached its quota (maxBytes) under quotaPolicy .rejectNew; deliver and acknowledge records, or raise maxBytes"
        case .diskFull:
            "the file system is full and the records waiting in memory reached their bound; free space on it"
        }
    }

    /// Every reason this version knows, for tests and for tools that list them.
    package static var allCases: [RefusalReason] { Kind.allCases.map(RefusalReason.init) }

    /// The reason a stored counter was saved under (``name``, or the shorter names of earlier
    /// versions), or nil for one this version does not know.
    package init?(name: String) {
        switch name {
        case "invalid": self = .invalidRecord
        case "tooLarge": self = .recordTooLarge
        case "quota": self = .quotaExceeded
        default:
            guard let kind = Kind(rawValue: name) else { return nil }
            self.kind = kind
        }
    }
}
