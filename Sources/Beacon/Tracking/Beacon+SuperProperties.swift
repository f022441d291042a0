extension Beacon {
    /// The registered super properties.
    public var superProperties: [String: PropertyValue] { context.withLock { $0.superProperties } }

    /// Adds properties sent with every later event. Precedence, highest first: the event's own
    /// properties, dynamic super properties, super properties, presets. A super property with a
    /// preset's key (`$app_version`) overrides the preset. Invalid entries are refused with a
    /// diagnostic; the valid ones are registered.
    public func register(superProperties: [String: PropertyValue]) {
        var valid: [String: PropertyValue] = [:]
        for (key, value) in superProperties {
            do {
                _ = try Validation.checkName(key, isKey: true, event: "register", key: key)
                try Validation.checkValue(value, event: "register", key: key)
                valid[key] = value
            } catch let error as BeaconValidationError {
                refuse(error)
            } catch {}
        }
        updateSuperProperties { $0.merge(valid) { _, new in new } }
    }

    /// Removes one super property.
    public func unregister(superProperty key: String) {
        updateSuperProperties { $0.removeValue(forKey: key) }
    }

    /// Removes every super property.
    public func clearSuperProperties() {
        updateSuperProperties { $0.removeAll() }
    }

    /// Sets a closure whose properties are added to every later event, evaluated on the thread
    /// that calls `track` (keep it fast and thread-safe). They win over super properties, being
    /// fresher, and lose to the event's own. An invalid key or value in them refuses the event
    /// like the event's own properties would. Pass nil to remove it.
    public func registerDynamicSuperProperties(_ provider: (@Sendable () -> [String: PropertyValue])?) {
        context.withLock { c in
            c.dynamicSuperProperties = provider
            c.snapshot = Snapshot(anonymousId: c.identity.anonymousId, loginId: c.identity.loginId, presets: presets,
                                  superProperties: c.superProperties, dynamicSuperProperties: provider)
        }
    }

    func updateSuperProperties(_ change: (inout [String: PropertyValue]) -> Void) {
        context.withLock { c in
            change(&c.superProperties)
            c.snapshot = Snapshot(anonymousId: c.identity.anonymousId, loginId: c.identity.loginId, presets: presets,
                                  superProperties: c.superProperties, dynamicSuperProperties: c.dynamicSuperProperties)
        }
    }
}
