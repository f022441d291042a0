import FaultInjection
import Foundation
import Glibc
import Testing
@testable import BeaconLog

/// One error model: the code comes from the system call's own `errno`, captured where the call
/// failed (never guessed back from Foundation's errors), the cause names the call, its `errno`
/// and the path, and the advice is the caller's, for what the call was for.
@Suite("Errors: the system call's errno captured at the call, advice from the caller")
struct ErrorModelTests {
    /// `/dev/full` refuses every write with `ENOSPC`: the error says so through its code and cause.
    /// Opened here, not through the seam, which opens nothing but regular files.
    @Test func aWriteKeepsItsErrno() throws {
        let fs = SystemFileSystem()
        let fd = Glibc.open("/dev/full", O_RDWR | O_CLOEXEC)
        try #require(fd >= 0)
        let file = LogFile(handle: FileHandle(fileDescriptor: fd, closeOnDealloc: true), path: "/dev/full")
        defer { fs.close(file) }
        let bytes: [UInt8] = Array(repeating: 0x61, count: 100)
        let error = expectLogError(.diskFull) { try bytes.withUnsafeBytes { try fs.write(file, $0) } }
        #expect(error?.cause == .init(systemCall: "write", errno: ENOSPC, path: "/dev/full"))
        #expect(error?.errno == ENOSPC && error?.path == "/dev/full")
    }

    /// `fdatasync` of a pipe fails with `EINVAL`: the cause is `fdatasync`'s own, not an `EIO` made up.
    @Test func anFsyncKeepsItsErrno() throws {
        var fds: [Int32] = [0, 0]
        #expect(pipe(&fds) == 0)
        defer { Glibc.close(fds[0]) }
        let file = LogFile(handle: FileHandle(fileDescriptor: fds[1], closeOnDealloc: true), path: "pipe")
        let error = expectLogError(.io) { try SystemFileSystem().sync(file) }
        #expect(error?.cause?.systemCall == "fdatasync" && error?.cause?.errno == EINVAL)
        #expect(error?.message.contains("check the kernel log") == false, "no advice without a caller: \(error?.message ?? "")")
    }

    /// `EACCES` on a log file opening the log: permission denied, with the advice about who must
    /// own the directory, which is what opening the log needs.
    @Test func permissionDeniedOpeningTheLogSaysWhoMustOwnIt() throws {
        try withTemporaryDirectory { dir in
            let fs = FaultyFileSystem()
            fs.inject(.open, errno: EACCES, path: ".lock")
            var config = BeaconLog.Configuration(directory: dir)
            config.fileSystem = fs
            let error = expectLogError(.permissionDenied) { _ = try BeaconLog(configuration: config) }
            #expect(error?.cause?.systemCall == "open" && error?.cause?.errno == EACCES)
            #expect(error?.message.contains("must belong to the user this process runs as") == true, "\(error?.message ?? "")")
        }
    }

    /// Every errno maps to one code, and the message of the mapping holds no advice.
    @Test(arguments: [(ENOSPC, "diskFull"), (EDQUOT, "diskFull"), (EACCES, "permissionDenied"), (EPERM, "permissionDenied"), (EIO, "io"), (EROFS, "io")])
    func errnoMapping(_ e: Int32, _ code: String) {
        let error = BeaconLogError.system(e, path: "/x/identity.json", operation: "rename")
        #expect(error.code.name == code)
        #expect(error.message == "rename failed: \(String(cString: strerror(e)))")
        #expect(error.cause == .init(systemCall: "rename", errno: e, path: "/x/identity.json"))
    }
}
