/// Encodes one record (its fields in this order: `_track_id`, `time`, `type`, `event`, identity,
/// `properties`) into bytes, validating as it goes. Property order inside `properties`: the caller's, then
/// dynamic super properties, then super properties and presets; a key appears once, taken from
/// the first of caller > dynamic super > super > presets that has it.
enum RecordEncoder {
    /// The `type` field.
    enum RecordType: String, Sendable {
        case track
        case profileSet = "profile_set"
        case profileSetOnce = "profile_set_once"
        case profileIncrement = "profile_increment"
        case profileAppend = "profile_append"
        case profileUnset = "profile_unset"
        case profileDelete = "profile_delete"
    }

    struct Input {
        var type: RecordType
        /// The event name (nil for profile records).
        var event: String?
        /// Beacon's own events (`$AppStart`, `$AppEnd`) may start with `$`.
        var isBeaconEvent = false
        var properties: [String: PropertyValue]
        var distinctId: String?
        /// `$event_duration` in thousandths of a millisecond (microseconds), if any.
        var durationMicroseconds: Int64?
        /// Presets, super and dynamic super properties (events only, not profiles).
        var withPresets: Bool
    }

    /// The name diagnostics use for the record: its event, or its profile operation.
    static func subject(_ input: Input) -> String { input.event ?? input.type.rawValue }

    static func encode(_ input: Input, trackId: UInt64, timeMilliseconds: Int64, snapshot: Snapshot, into out: inout ByteWriter) throws {
        let subject = subject(input)
        out.append(#"{"_track_id":"#)
        JSONBytes.appendUInt(trackId, to: &out)
        out.append(#","time":"#)
        JSONBytes.appendInt(timeMilliseconds, to: &out)
        out.append(#","type":""#)
        JSONBytes.appendRaw(input.type.rawValue, to: &out)
        out.append(0x22)
        if let event = input.event {
            var name = event
            try name.withUTF8 { utf8 in
                if !(input.isBeaconEvent && Validation.isIdentifier(utf8)) {
                    _ = try Validation.checkName(utf8, isKey: false, event: subject, key: nil)
                }
                out.append(#","event":""#)
                out.append(utf8)
                out.append(0x22)
            }
        }
        out.append(0x2C)
        if let distinctId = input.distinctId {
            try Validation.checkIdentity(distinctId, what: "distinct id", event: subject)
            out.append(#""distinct_id":"#)
            JSONBytes.appendString(distinctId, to: &out)
            out.append(#","anonymous_id":"#)
            JSONBytes.appendString(snapshot.anonymousId, to: &out)
            if let loginId = snapshot.loginId {
                out.append(#","login_id":"#)
                JSONBytes.appendString(loginId, to: &out)
            }
        } else {
            out.append(snapshot.identityBytes)
        }
        out.append(#","properties":{"#)
        var first = true
        var sawPresetKey = try appendProperties(input.properties, skip: nil, subject: subject, first: &first, into: &out)
        if input.withPresets {
            var dynamic: [String: PropertyValue]?
            if let provider = snapshot.dynamicSuperProperties {
                let values = provider()
                dynamic = values
                if try appendProperties(values, skip: input.properties, subject: subject, first: &first, into: &out) {
                    sawPresetKey = true
                }
            }
            let mustFilter = sawPresetKey || (snapshot.hasSuperProperties && (!input.properties.isEmpty || !(dynamic?.isEmpty ?? true)))
            if !mustFilter {
                if !snapshot.baseBytes.isEmpty {
                    if !first { out.append(0x2C) }
                    out.append(snapshot.baseBytes)
                    first = false
                }
            } else {
                for entry in snapshot.base where input.properties[entry.key] == nil && dynamic?[entry.key] == nil {
                    if !first { out.append(0x2C) }
                    first = false
                    JSONBytes.appendString(entry.key, to: &out)
                    out.append(0x3A)
                    JSONBytes.appendValue(entry.value, to: &out)
                }
            }
        }
        if let duration = input.durationMicroseconds {
            if !first { out.append(0x2C) }
            out.append(#""$event_duration":"#)
            JSONBytes.appendThousandths(duration, to: &out)
        }
        out.append(0x7D)
        out.append(0x7D)
    }

    /// Validates and appends `properties` except the keys in `skip`; returns true if a preset key
    /// (`$…`) was among them.
    static func appendProperties(_ properties: [String: PropertyValue], skip: [String: PropertyValue]?, subject: String, first: inout Bool, into out: inout ByteWriter) throws -> Bool {
        var sawPresetKey = false
        for (key, value) in properties {
            if let skip, skip[key] != nil { continue }
            var name = key
            try name.withUTF8 { utf8 in
                if try Validation.checkName(utf8, isKey: true, event: subject, key: key) { sawPresetKey = true }
                if !first { out.append(0x2C) }
                first = false
                JSONBytes.appendKey(utf8, to: &out)
            }
            try Validation.checkValue(value, event: subject, key: key)
            JSONBytes.appendValue(value, to: &out)
        }
        return sawPresetKey
    }
}
