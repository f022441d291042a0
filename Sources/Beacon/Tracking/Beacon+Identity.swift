extension Beacon {
    /// The id events are tracked under: the login id when logged in, else the anonymous id.
    public var distinctId: String { context.withLock { $0.identity.loginId ?? $0.identity.anonymousId } }
    /// The anonymous id, kept in `identity.json` across restarts.
    public var anonymousId: String { context.withLock { $0.identity.anonymousId } }
    /// The login id, or nil when logged out.
    public var loginId: String? { context.withLock { $0.identity.loginId } }

    /// Tracks later events under `loginId` (1 to 255 bytes), and keeps it across restarts.
    ///
    /// Writes `identity.json` atomically (temporary file, fsync, rename, directory fsync): call it
    /// when a user logs in, not per event. An invalid id is refused with a diagnostic.
    public func login(_ loginId: String) {
        do { try Validation.checkIdentity(loginId, what: "login id", event: "login") } catch let error as BeaconValidationError {
            refuse(error)
            return
        } catch {}
        changeIdentity { $0.loginId = loginId }
    }

    /// Returns to the anonymous id.
    public func logout() {
        changeIdentity { $0.loginId = nil }
    }

    /// Replaces the anonymous id (1 to 255 bytes), for example with a device or installation id.
    public func identify(anonymousId: String) {
        do { try Validation.checkIdentity(anonymousId, what: "anonymous id", event: "identify") } catch let error as BeaconValidationError {
            refuse(error)
            return
        } catch {}
        changeIdentity { $0.anonymousId = anonymousId }
    }

    /// Applies a change, rebuilds the snapshot and saves the file. Saving is serialised so the
    /// file always ends with the newest identity.
    func changeIdentity(_ change: (inout IdentityStore.Identity) -> Void) {
        identitySaves.withLock { _ in
            let (identity, changed) = context.withLock { c -> (IdentityStore.Identity, Bool) in
                var identity = c.identity
                change(&identity)
                guard identity != c.identity else { return (identity, false) }
                c.identity = identity
                c.snapshot = c.snapshot.with(anonymousId: identity.anonymousId, loginId: identity.loginId, presets: presets)
                return (identity, true)
            }
            guard changed else { return }
            do { try identityStore.save(identity) } catch { noteStorageError(error) }
        }
    }
}
