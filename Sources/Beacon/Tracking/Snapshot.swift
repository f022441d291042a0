/// What every record of the moment shares, pre-encoded: the identity fields and the presets
/// merged with the super properties. Rebuilt (rarely) on login, logout, identify and register;
/// `track` reads it with one lock and copies its bytes.
final class Snapshot: Sendable {
    struct Entry: Sendable {
        let key: String
        let value: PropertyValue
    }

    let anonymousId: String
    let loginId: String?
    /// `"distinct_id":"…","anonymous_id":"…"` and `,"login_id":"…"` when logged in.
    let identityBytes: [UInt8]
    /// Presets overridden by super properties, then the super properties, as entries.
    let base: [Entry]
    /// `base` encoded as `"k":v,"k":v` (no braces).
    let baseBytes: [UInt8]
    /// True when super properties are registered (the caller's keys must then be checked against them).
    let hasSuperProperties: Bool
    let superProperties: [String: PropertyValue]
    let dynamicSuperProperties: (@Sendable () -> [String: PropertyValue])?

    init(anonymousId: String, loginId: String?, presets: [Entry], superProperties: [String: PropertyValue],
         dynamicSuperProperties: (@Sendable () -> [String: PropertyValue])?) {
        self.anonymousId = anonymousId
        self.loginId = loginId
        var identity: [UInt8] = []
        identity.append(contentsOf: #""distinct_id":"#.utf8)
        JSONBytes.appendString(loginId ?? anonymousId, to: &identity)
        identity.append(contentsOf: #","anonymous_id":"#.utf8)
        JSONBytes.appendString(anonymousId, to: &identity)
        if let loginId {
            identity.append(contentsOf: #","login_id":"#.utf8)
            JSONBytes.appendString(loginId, to: &identity)
        }
        self.identityBytes = identity
        var base = presets.filter { superProperties[$0.key] == nil }
        base += superProperties.sorted { $0.key < $1.key }.map { Entry(key: $0.key, value: $0.value) }
        self.base = base
        var bytes: [UInt8] = []
        for (index, entry) in base.enumerated() {
            if index > 0 { bytes.append(0x2C) }
            JSONBytes.appendString(entry.key, to: &bytes)
            bytes.append(0x3A)
            JSONBytes.appendValue(entry.value, to: &bytes)
        }
        self.baseBytes = bytes
        self.hasSuperProperties = !superProperties.isEmpty
        self.superProperties = superProperties
        self.dynamicSuperProperties = dynamicSuperProperties
    }

    /// The same presets and properties with another identity.
    func with(anonymousId: String, loginId: String?, presets: [Entry]) -> Snapshot {
        Snapshot(anonymousId: anonymousId, loginId: loginId, presets: presets, superProperties: superProperties, dynamicSuperProperties: dynamicSuperProperties)
    }
}
