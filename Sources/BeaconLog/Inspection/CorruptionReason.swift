/// Why a corrupt record was passed over while reading: the key of
/// ``LogStats/skippedCorruptByReason``.
///
/// Compare with the static reasons; the set may grow in a later version, so keep a default case.
/// Only the library makes reasons.
public struct CorruptionReason: Hashable, Sendable, CustomStringConvertible {
    private enum Kind: String, CaseIterable, Sendable {
        case checksum, malformed, zeros, tornTail, seqDigits
    }

    private let kind: Kind
    private init(_ kind: Kind) { self.kind = kind }

    /// The event's bytes changed on disk: the record fails its CRC-32C.
    public static let checksum = CorruptionReason(.checksum)
    /// The line is not a record, or is cut short.
    public static let malformed = CorruptionReason(.malformed)
    /// A block of zero bytes instead of records (a torn write or a zero-filled block).
    public static let zeros = CorruptionReason(.zeros)
    /// An incomplete last line of a sealed segment.
    public static let tornTail = CorruptionReason(.tornTail)
    /// A record whose sequence-number digits were damaged (its event is still delivered when the
    /// number can be inferred from its neighbours).
    public static let seqDigits = CorruptionReason(.seqDigits)

    /// A stable identifier without spaces, for metric labels and JSON: `"checksum"`.
    public var name: String { kind.rawValue }

    public var description: String { name }

    /// What happened, for people, and what to do about it.
    public var explanation: String {
        switch kind {
        case .checksum: "a record's bytes changed on disk (its checksum fails); the disk or something writing to the directory damaged it"
        case .malformed: "a line of a segment is not a record or is cut short; something other than the log wrote to the directory, or the disk damaged it"
        case .zeros: "a block of zero bytes stands where records were (a torn write or a zero-filled block after a crash)"
        case .tornTail: "a sealed segment ends with an incomplete line (a crash while it was written)"
        case .seqDigits: "a record's sequence number was damaged on disk"
        }
    }

    /// Every reason this version knows, for tests and for tools that list them.
    package static var allCases: [CorruptionReason] { Kind.allCases.map(CorruptionReason.init) }

    /// The reason a stored counter was saved under, or nil for one this version does not know.
    package init?(name: String) {
        guard let kind = Kind(rawValue: name) else { return nil }
        self.kind = kind
    }
}
