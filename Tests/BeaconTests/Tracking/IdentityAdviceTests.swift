import FaultInjection
import Foundation
import Glibc
import Testing
@testable import Beacon

/// The advice in an error is the caller's: `EACCES` writing `identity.json` speaks of the
/// identity file, not of the log directory's owner (which the errno mapping once said for any
/// `EACCES`, whatever the file).
@Suite("identity.json: a refused save says what it means for the identity")
struct IdentityAdviceTests {
    @Test func permissionDeniedOnTheIdentity() async throws {
        try await withTrackerDirectoryOffPool { dir in
            let fs = FaultyFileSystem()
            fs.inject(.rename, errno: EACCES, path: "identity.json")
            let diagnostics = DiagnosticsCollector()
            var config = Beacon.Configuration.testing(dir, diagnostics: diagnostics)
            config.storage.fileSystem = fs
            let beacon = try Beacon(configuration: config)
            beacon.closeNow()
            let storage = diagnostics.all.filter { $0.kind == .storage }.map(\.message)
            #expect(!storage.isEmpty)
            #expect(storage.allSatisfy { $0.contains("identity") && !$0.contains("log directory") }, "\(storage)")
            #expect(storage.contains { $0.contains("the identity stays in memory") }, "\(storage)")
        }
    }
}
