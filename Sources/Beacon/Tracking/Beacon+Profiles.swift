extension Beacon {
    /// Sets properties of the user's profile (record type `profile_set`), replacing earlier values.
    public func profileSet(_ properties: [String: PropertyValue], distinctId: String? = nil) {
        profile(.profileSet, properties, distinctId: distinctId)
    }

    /// Sets properties of the user's profile only where they are not set yet (`profile_set_once`).
    public func profileSetOnce(_ properties: [String: PropertyValue], distinctId: String? = nil) {
        profile(.profileSetOnce, properties, distinctId: distinctId)
    }

    /// Adds numbers to numeric profile properties (`profile_increment`); values must be numbers.
    public func profileIncrement(_ properties: [String: PropertyValue], distinctId: String? = nil) {
        for (key, value) in properties {
            switch value {
            case .int, .double: continue
            default:
                refuse(BeaconValidationError(event: "profile_increment", key: key, code: .notANumber,
                                             message: "profileIncrement takes numbers, not \(value); send an int or a double"))
                return
            }
        }
        profile(.profileIncrement, properties, distinctId: distinctId)
    }

    /// Appends strings to list properties of the profile (`profile_append`).
    public func profileAppend(_ properties: [String: [String]], distinctId: String? = nil) {
        profile(.profileAppend, properties.mapValues { .strings($0) }, distinctId: distinctId)
    }

    /// Removes one property from the profile (`profile_unset`).
    public func profileUnset(_ key: String, distinctId: String? = nil) {
        profileUnset([key], distinctId: distinctId)
    }

    /// Removes properties from the profile (`profile_unset`, each key with the value `true`).
    public func profileUnset(_ keys: [String], distinctId: String? = nil) {
        var properties: [String: PropertyValue] = [:]
        for key in keys { properties[key] = true }
        profile(.profileUnset, properties, distinctId: distinctId)
    }

    /// Deletes the user's profile (`profile_delete`).
    public func profileDelete(distinctId: String? = nil) {
        profile(.profileDelete, [:], distinctId: distinctId)
    }

    func profile(_ type: RecordEncoder.RecordType, _ properties: [String: PropertyValue], distinctId: String?) {
        record(RecordEncoder.Input(type: type, event: nil, properties: properties, distinctId: distinctId, durationMicroseconds: nil, withPresets: false))
    }
}
