import Foundation
import Glibc
import Testing
@testable import BeaconLog

/// A log directory others could write is refused at open, before any file in it is touched, with
/// the command that fixes it (issue 32).
@Suite struct DirectorySafetyTests {
    static let me = geteuid()
    static let someoneElse: UInt32 = me == 54_321 ? 54_322 : 54_321

    /// The rule, as the README's Guarantees state it: others may never write; the group may write
    /// and another user may own it only with `.group`.
    static func allowed(mode: UInt32, owner: UInt32, sharing: BeaconLog.DirectorySharing) -> Bool {
        if mode & 0o002 != 0 { return false }
        if sharing == .group { return true }
        return mode & 0o020 == 0 && owner == me
    }

    @Test("every mode 0000…7777 × owner (this user, another) × sharing: refused exactly when the rule says, and then with a fix to run", arguments: [BeaconLog.DirectorySharing.owner, .group])
    func everyMode(_ sharing: BeaconLog.DirectorySharing) {
        for mode in UInt32(0)...0o7777 {
            for owner in [Self.me, Self.someoneElse] {
                let status = DirectoryStatus(mode: mode, owner: owner, group: 0)
                let problem = BeaconLog.unsafeDirectoryProblem(status, path: "/srv/log dir", user: Self.me, sharing: sharing)
                let expected = Self.allowed(mode: mode, owner: owner, sharing: sharing)
                #expect((problem == nil) == expected, "mode \(String(mode, radix: 8)) owner \(owner) \(sharing): \(problem ?? "allowed")")
                if let problem {
                    #expect(problem.contains("/srv/log dir"))
                    #expect(problem.contains("chmod 700 '/srv/log dir'") || problem.contains("chown \(Self.me) '/srv/log dir'"), "\(problem)")
                }
            }
        }
    }

    func mode(_ path: String) throws -> Int {
        try #require(FileManager.default.attributesOfItem(atPath: path)[.posixPermissions] as? Int)
    }

    /// A directory made with `mode` (and, when given, chowned to `owner`).
    func directory(_ root: String, mode: mode_t, owner: uid_t? = nil) throws -> String {
        let dir = root + "/log"
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        #expect(mkdir(dir, 0o700) == 0)
        #expect(chmod(dir, mode) == 0)
        if let owner { #expect(chown(dir, owner, gid_t.max) == 0, "chown: \(String(cString: strerror(errno)))") }
        return dir
    }

    func open(_ dir: String, sharing: BeaconLog.DirectorySharing = .owner) throws {
        var config = smallConfig(dir)
        config.sharing = sharing
        let log = try BeaconLog(configuration: config)
        try log.append("x")
        try log.close()
    }

    @Test("a directory every user may write (0777, and 1777 with the sticky bit) is refused, nothing is created in it, and the message names chmod 700", arguments: [mode_t(0o777), 0o1777, 0o757, 0o703])
    func worldWritable(_ mode: mode_t) throws {
        try withTemporaryDirectory { root in
            let dir = try directory(root, mode: mode)
            for sharing in [BeaconLog.DirectorySharing.owner, .group] {
                let error = expectLogError(.unsafeDirectory) { try open(dir, sharing: sharing) }
                #expect(error?.message.contains("chmod 700 \(dir)") == true, "\(error.map(String.init(describing:)) ?? "")")
                #expect(error?.message.contains("every user") == true)
                if mode & 0o1000 != 0 { #expect(error?.message.contains("sticky bit") == true) }
                #expect(error?.path == dir)
            }
            #expect(try FileManager.default.contentsOfDirectory(atPath: dir).isEmpty)
            #expect(try self.mode(dir) & 0o777 == Int(mode & 0o777), "the mode is left as it was")
        }
    }

    @Test("a group-writable directory is refused by default, naming chmod 700 and sharing = .group; with sharing = .group it is used", arguments: [mode_t(0o770), 0o2770, 0o1770, 0o775])
    func groupWritable(_ mode: mode_t) throws {
        try withTemporaryDirectory { root in
            let dir = try directory(root, mode: mode)
            let error = expectLogError(.unsafeDirectory) { try open(dir) }
            #expect(error?.message.contains("chmod 700 \(dir)") == true)
            #expect(error?.message.contains("sharing = .group") == true)
            #expect(try FileManager.default.contentsOfDirectory(atPath: dir).isEmpty)
            try open(dir, sharing: .group)
        }
    }

    @Test("modes no one else can write are used as they are", arguments: [mode_t(0o700), 0o750, 0o755, 0o711, 0o2700])
    func safeModes(_ mode: mode_t) throws {
        try withTemporaryDirectory { root in
            try open(try directory(root, mode: mode))
        }
    }

    @Test("a directory owned by another user is refused (naming chown), unless sharing = .group; needs root to chown")
    func anotherOwner() throws {
        guard geteuid() == 0 else { return }
        try withTemporaryDirectory { root in
            let dir = try directory(root, mode: 0o700, owner: Self.someoneElse)
            let error = expectLogError(.unsafeDirectory) { try open(dir) }
            #expect(error?.message.contains("belongs to uid \(Self.someoneElse)") == true, "\(error.map(String.init(describing:)) ?? "")")
            #expect(error?.message.contains("chown \(Self.me) \(dir)") == true)
            #expect(try FileManager.default.contentsOfDirectory(atPath: dir).isEmpty)
            try open(dir, sharing: .group)
        }
    }

    @Test("read-only access (beacon cat, status) is checked too")
    func readOnlyChecked() throws {
        try withTemporaryDirectory { root in
            let dir = try directory(root, mode: 0o700)
            try open(dir)
            #expect(chmod(dir, 0o777) == 0)
            var config = smallConfig(dir)
            config.access = .readOnly
            _ = expectLogError(.unsafeDirectory) { _ = try BeaconLog(configuration: config) }
        }
    }
}
