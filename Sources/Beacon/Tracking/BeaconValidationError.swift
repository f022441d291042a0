/// Why `track` (or a profile call) refused its input: which event, which key, which rule.
///
/// `track` never throws: it reports this through the diagnostics handler and counts it in
/// ``BeaconStats/invalid``. ``Beacon/validate(_:properties:distinctId:)-(_,[String:PropertyValue],_)`` throws it, for tests.
public struct BeaconValidationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// The validation rule broken (the error's code): the key of ``BeaconStats/invalidByRule``.
    ///
    /// Compare with the static rules; the set may grow in a later version, so keep a default case.
    /// Only the library makes rules.
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Kind: String, CaseIterable, Sendable {
            case identifier, reservedName, reservedPrefix, stringTooLong, nonFiniteNumber
            case dateOutOfRange, invalidIdentity, notANumber, recordTooLarge
        }

        private let kind: Kind
        private init(_ kind: Kind) { self.kind = kind }

        /// Event names and property keys: ASCII letters, digits, `_` and `$`, not starting with a
        /// digit, 1 to 100 characters.
        public static let identifier = Code(.identifier)
        /// The name is one of the record's own fields or otherwise reserved (`time`, `event`,
        /// `distinct_id`, `properties`, …).
        public static let reservedName = Code(.reservedName)
        /// `$` starts the names of Beacon's own presets and events; only a preset key
        /// (`$app_version`, `$os`, …) may be set, to override it.
        public static let reservedPrefix = Code(.reservedPrefix)
        /// A string (or a string in an array) is longer than 8 KiB of UTF-8.
        public static let stringTooLong = Code(.stringTooLong)
        /// A double is NaN or infinite, which JSON cannot carry.
        public static let nonFiniteNumber = Code(.nonFiniteNumber)
        /// A date outside the years 1 to 9999.
        public static let dateOutOfRange = Code(.dateOutOfRange)
        /// A distinct id, anonymous id or login id is empty or longer than 255 bytes.
        public static let invalidIdentity = Code(.invalidIdentity)
        /// `profileIncrement` takes only numbers.
        public static let notANumber = Code(.notANumber)
        /// The encoded record is larger than the log's `maxRecordBytes`.
        public static let recordTooLarge = Code(.recordTooLarge)

        /// A stable identifier without spaces, for metric labels and JSON: `"stringTooLong"`.
        public var name: String { kind.rawValue }

        public var description: String { name }

        /// Every rule this version knows, for tests.
        package static var allCases: [Code] { Kind.allCases.map(Code.init) }
    }

    /// The event (or profile operation such as `profile_set`) whose input was refused.
    public var event: String
    /// The property key concerned, if the problem is in one property.
    public var key: String?
    /// The rule that was broken.
    public var code: Code
    /// A sentence for people: what is wrong and what to do.
    public var message: String

    /// The error for `event` (and `key`, when a property is at fault), the broken rule's `code` and `message`.
    public init(event: String, key: String?, code: Code, message: String) {
        self.event = event
        self.key = key
        self.code = code
        self.message = message
    }

    public var description: String {
        var text = "validation error (\(code)): event \"\(event)\""
        if let key { text += ", property \"\(key)\"" }
        return text + ": \(message)"
    }
}
