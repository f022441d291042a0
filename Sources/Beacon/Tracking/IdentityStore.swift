import BeaconLog
import Foundation

/// The tracker's identity on disk: `identity.json` in the log directory, mode 0600,
/// `{"anonymous_id":"…","login_id":"…"}`, replaced atomically through the log's file-system seam
/// (temporary file, `fsync`, `rename`, `fsync` of the directory) so a crash leaves the old or the
/// new one.
struct IdentityStore: Sendable {
    struct Identity: Sendable, Equatable {
        var anonymousId: String
        var loginId: String?
    }

    let directory: LogDirectory
    let fileSystem: any FileSystem
    var path: LogPath { directory.file("identity.json") }

    init(directory: LogDirectory, fileSystem: any FileSystem) {
        self.directory = directory
        self.fileSystem = fileSystem
    }

    init(directory: String, fileSystem: any FileSystem) {
        self.init(directory: LogDirectory(directory), fileSystem: fileSystem)
    }

    /// The stored identity, or nil if there is none.
    ///
    /// Throws ``IdentityError`` with `invalid` set when the file holds no identity (the caller
    /// makes a new one and rewrites the file), and with `invalid` unset when it could not be read
    /// (the caller makes one for this run and leaves the file alone, so the stored identity comes
    /// back at the next start).
    func load() throws -> Identity? {
        let read: [UInt8]?
        do {
            // A second try: one transient read error must not cost the identity.
            read = try fileSystem.contents(ofFile: path, attempts: 2)
        } catch {
            throw IdentityError(message: "\(path) could not be read (\(error)); a new anonymous id is used until the next start, and the file is left as it is", invalid: false)
        }
        guard let bytes = read else { return nil }
        guard let object = try? JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any],
              let anonymous = object["anonymous_id"] as? String, !anonymous.isEmpty else {
            throw IdentityError(message: "\(path) is not a valid identity file (\(bytes.count) bytes); a new anonymous id was made and the file will be rewritten", invalid: true)
        }
        return Identity(anonymousId: anonymous, loginId: object["login_id"] as? String)
    }

    /// Writes `identity` atomically and durably; throws ``BeaconLogError`` naming the file.
    func save(_ identity: Identity) throws {
        var bytes: [UInt8] = Array(#"{"anonymous_id":"#.utf8)
        JSONBytes.appendString(identity.anonymousId, to: &bytes)
        if let login = identity.loginId {
            bytes.append(contentsOf: #","login_id":"#.utf8)
            JSONBytes.appendString(login, to: &bytes)
        }
        bytes.append(contentsOf: "}\n".utf8)
        do {
            try fileSystem.replaceFile(path, with: bytes)
        } catch let error as BeaconLogError {
            let advice = error.code == .permissionDenied
                ? "the identity stays in memory until the next start; \(path) and its directory must be writable by the user this process runs as"
                : "the identity stays in memory until the next start; the file keeps the identity it had"
            throw error.advising(advice)
        }
    }
}

/// The identity file could not be read or holds no identity.
struct IdentityError: Error, CustomStringConvertible {
    var message: String
    /// The file was read and holds no identity (as opposed to: it could not be read).
    var invalid: Bool
    var description: String { message }
}
