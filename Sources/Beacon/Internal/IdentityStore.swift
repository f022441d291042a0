import Foundation
import Glibc

/// The tracker's identity on disk: `identity.json` in the log directory, mode 0600,
/// `{"anonymous_id":"…","login_id":"…"}`, replaced atomically (temporary file, `fsync`,
/// `rename`, `fsync` of the directory) so a crash leaves the old or the new one.
struct IdentityStore: Sendable {
    struct Identity: Sendable, Equatable {
        var anonymousId: String
        var loginId: String?
    }

    let directory: String
    var path: String { directory + "/identity.json" }

    /// The stored identity, or nil if there is none (or it cannot be understood; the caller makes
    /// a new one and reports it).
    func load() throws -> Identity? {
        guard let data = FileManager.default.contents(atPath: path) else { return nil }
        guard let object = try? JSONSerialization.jsonObject(with: data) as? [String: Any],
              let anonymous = object["anonymous_id"] as? String, !anonymous.isEmpty else {
            throw IdentityError(message: "\(path) is not a valid identity file (\(data.count) bytes); a new anonymous id was made and the file will be rewritten")
        }
        return Identity(anonymousId: anonymous, loginId: object["login_id"] as? String)
    }

    /// Writes `identity` atomically and durably.
    func save(_ identity: Identity) throws {
        var bytes: [UInt8] = Array(#"{"anonymous_id":"#.utf8)
        JSONBytes.appendString(identity.anonymousId, to: &bytes)
        if let login = identity.loginId {
            bytes.append(contentsOf: #","login_id":"#.utf8)
            JSONBytes.appendString(login, to: &bytes)
        }
        bytes.append(contentsOf: "}\n".utf8)
        let temporary = path + ".tmp"
        let fd = open(temporary, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
        guard fd >= 0 else { throw IdentityError(path: temporary, call: "open") }
        var offset = 0
        while offset < bytes.count {
            let written = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress! + offset, $0.count - offset) }
            if written < 0 {
                if errno == EINTR { continue }
                let error = IdentityError(path: temporary, call: "write")
                close(fd)
                throw error
            }
            offset += written
        }
        if fsync(fd) != 0 {
            let error = IdentityError(path: temporary, call: "fsync")
            close(fd)
            throw error
        }
        close(fd)
        guard rename(temporary, path) == 0 else { throw IdentityError(path: path, call: "rename") }
        let dfd = open(directory, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard dfd >= 0 else { throw IdentityError(path: directory, call: "open") }
        defer { close(dfd) }
        guard fsync(dfd) == 0 else { throw IdentityError(path: directory, call: "fsync") }
    }
}

/// The identity file could not be read or written.
struct IdentityError: Error, CustomStringConvertible {
    var message: String
    init(message: String) { self.message = message }
    init(path: String, call: String) {
        let code = errno
        message = "\(call) failed on \(path): \(String(cString: strerror(code))) (errno \(code)); the identity is kept in memory, check the directory's permissions and free space"
    }
    var description: String { message }
}
