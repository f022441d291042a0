import BeaconLog
import Foundation
import Glibc

/// `beacon-test-child lock DIR writer|reader`: opens the log in DIR holding its writer lock
/// (access `.write`) or its reader lock (access `.read`), prints `locked PID`, and sleeps until
/// killed. Exits 2 with the error on stderr if the lock is taken.
func runLockChild(_ arguments: [String]) -> Never {
    guard arguments.count == 2, let access: BeaconLog.Access = ["writer": .write, "reader": .read][arguments[1]] else {
        FileHandle.standardError.write(Data("usage: beacon-test-child lock DIR writer|reader\n".utf8))
        exit(64)
    }
    var config = BeaconLog.Configuration(directory: arguments[0])
    config.access = access
    let log: BeaconLog
    do {
        log = try BeaconLog(configuration: config)
    } catch {
        FileHandle.standardError.write(Data("beacon-test-child lock: \(error)\n".utf8))
        exit(2)
    }
    childPrint("locked \(getpid())")
    while true {
        withExtendedLifetime(log) { _ = sleep(1000) }
    }
}

/// Writes one line to stdout at once (unbuffered), so a test sees it before a SIGKILL.
func childPrint(_ line: String) {
    let bytes = Array((line + "\n").utf8)
    var done = 0
    while done < bytes.count {
        let n = bytes[done...].withUnsafeBytes { Glibc.write(1, $0.baseAddress, $0.count) }
        if n <= 0 { if errno == EINTR { continue }; exit(3) }
        done += n
    }
}
