/// Why `track` (or a profile call) refused its input: which event, which key, which rule.
///
/// `track` never throws: it reports this through the diagnostics handler and counts it in
/// ``BeaconStats/invalid``. ``Beacon/validate(_:properties:distinctId:)`` throws it, for tests.
public struct BeaconValidationError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A validation rule.
    public enum Rule: String, Sendable, CaseIterable {
        /// Event names and property keys: ASCII letters, digits, `_` and `$`, not starting with a
        /// digit, 1 to 100 characters.
        case identifier
        /// The name is one of the record's own fields or otherwise reserved (`time`, `event`,
        /// `distinct_id`, `properties`, …).
        case reservedName
        /// `$` starts the names of Beacon's own presets and events; only a preset key
        /// (`$app_version`, `$os`, …) may be set, to override it.
        case reservedPrefix
        /// A string (or a string in an array) is longer than 8 KiB of UTF-8.
        case stringTooLong
        /// A double is NaN or infinite, which JSON cannot carry.
        case nonFiniteNumber
        /// A date outside the years 1 to 9999.
        case dateOutOfRange
        /// A distinct id, anonymous id or login id is empty or longer than 255 bytes.
        case invalidIdentity
        /// `profileIncrement` takes only numbers.
        case notANumber
        /// The encoded record is larger than the log's `maxRecordBytes`.
        case recordTooLarge
    }

    /// The event (or profile operation such as `profile_set`) whose input was refused.
    public var event: String
    /// The property key concerned, if the problem is in one property.
    public var key: String?
    /// The rule that was broken.
    public var rule: Rule
    /// A sentence for people: what is wrong and what to do.
    public var message: String

    public init(event: String, key: String?, rule: Rule, message: String) {
        self.event = event
        self.key = key
        self.rule = rule
        self.message = message
    }

    public var description: String {
        var text = "invalid input for event \"\(event)\""
        if let key { text += ", property \"\(key)\"" }
        return text + " (rule \(rule.rawValue)): \(message)"
    }
}
