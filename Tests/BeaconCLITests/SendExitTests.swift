import Foundation
import Synchronization
import Testing
import BeaconTestTraits
@testable import BeaconCLI

/// Issue 26 (5): `beacon send` died with SIGSEGV at exit after a TLS send, 1 run in 80: the
/// task of `waitFor` let go of the last reference to the uploader on a worker thread after waking
/// the main thread, so the connection's deinitializer ran `SSL_shutdown` while the main thread was
/// in `exit()` → `OPENSSL_cleanup`.
@Suite("beacon send: nothing of the uploader is released on another thread after waitFor returns", .blocking)
struct SendExitTests {
    /// Set by the deinitializer of a ``Witness``, at its end.
    final class Flag: Sendable {
        let released = Mutex(false)
    }

    /// Captured by the closure `waitFor` runs: its deinitializer takes a while (as a TLS goodbye
    /// may), so that a release after the wake is seen.
    final class Witness: Sendable {
        let flag: Flag
        init(_ flag: Flag) { self.flag = flag }
        func touch() {}
        deinit {
            usleep(100_000)
            flag.released.withLock { $0 = true }
        }
    }

    @Test("waitFor returns after its task let go of the closure and everything it captured, every time")
    func closureReleasedBeforeReturn() async throws {
        for round in 0..<20 {
            let flag = Flag()
            let value = try await onOwnThread {
                SendCommand.waitFor({ [witness = Witness(flag)] in
                    witness.touch()
                    return round
                })
            }
            #expect(value == round)
            #expect(flag.released.withLock { $0 }, "round \(round): the closure was still held when waitFor returned")
        }
    }
}
