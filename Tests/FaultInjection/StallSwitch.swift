import Foundation
import Glibc
import Synchronization
import BeaconLog

/// A stalled disk for one test: while ``hold()`` holds it (a control file exists at ``path``), every
/// fsync and fdatasync through ``fileSystem(over:)`` of a `StallingFileSystem` on ``path`` waits,
/// and ``stalledSyncs`` counts those that began waiting. The test releases it when its check is
/// done (and in a `defer`).
///
/// ```swift
/// let stall = StallSwitch(dir + ".stall")
/// config.fileSystem = stall.fileSystem(over: StallingFileSystem(base: SystemFileSystem(), controlFile: stall.path))
/// stall.hold()   // … until stall.stalledSyncs > 0, then check, then stall.release()
/// ```
package final class StallSwitch: Sendable {
    package let path: String
    private let syncs = Atomic<Int>(0)

    package init(_ path: String) { self.path = path }

    /// `stalling` (which waits while ``path`` exists), seen from above: each fsync or fdatasync
    /// that starts while the stall is held is counted before it waits.
    package func fileSystem(over stalling: any FileSystem) -> FaultyFileSystem {
        let observed = FaultyFileSystem(base: stalling)
        observed.beforeCall = { [self] operation, _ in
            if operation == .sync || operation == .syncData, access(path, F_OK) == 0 { syncs.add(1, ordering: .relaxed) }
        }
        return observed
    }

    /// Fsyncs and fdatasyncs that began while the stall was held.
    package var stalledSyncs: Int { syncs.load(ordering: .relaxed) }

    package func hold() { _ = FileManager.default.createFile(atPath: path, contents: nil) }
    package func release() { unlink(path) }
}
