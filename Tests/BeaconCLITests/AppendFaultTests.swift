import Foundation
import Glibc
import Testing
import BeaconTestTraits
@testable import BeaconCLI

/// A shared library, preloaded into the built `beacon` (`LD_PRELOAD`), that fails `write(2)` or
/// `fsync(2)`/`fdatasync(2)` on the log's segment files (`*.jsonl`): the N-th call, once or from
/// then on, with a chosen `errno`. Every injected failure is noted in `BEACON_SHIM_LOG`.
///
///     BEACON_SHIM_WRITE_AT=N   BEACON_SHIM_WRITE_ERRNO=28   BEACON_SHIM_WRITE_PERSIST=1
///     BEACON_SHIM_FSYNC_AT=N   BEACON_SHIM_FSYNC_ERRNO=5    BEACON_SHIM_FSYNC_PERSIST=1
enum FaultShim {
    static let source = #"""
        #define _GNU_SOURCE
        #include <dlfcn.h>
        #include <errno.h>
        #include <fcntl.h>
        #include <stdio.h>
        #include <stdlib.h>
        #include <string.h>
        #include <unistd.h>

        static long writes, syncs;
        static ssize_t (*real_write)(int, const void *, size_t);
        static int (*real_fsync)(int);
        static int (*real_fdatasync)(int);

        static int is_segment(int fd) {
            char link[64], path[4096];
            snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
            ssize_t n = readlink(link, path, sizeof path - 1);
            if (n < 7) return 0;
            path[n] = 0;
            return strcmp(path + n - 6, ".jsonl") == 0;
        }

        static long setting(const char *kind, const char *what, long fallback) {
            char name[64];
            snprintf(name, sizeof name, "BEACON_SHIM_%s_%s", kind, what);
            const char *value = getenv(name);
            return value ? strtol(value, NULL, 10) : fallback;
        }

        /* The errno the count-th call of this kind fails with, or 0. */
        static int fault(const char *kind, long count) {
            long at = setting(kind, "AT", 0);
            if (at <= 0 || count < at) return 0;
            if (count > at && !setting(kind, "PERSIST", 0)) return 0;
            const char *log = getenv("BEACON_SHIM_LOG");
            if (log) {
                if (!real_write) real_write = dlsym(RTLD_NEXT, "write");
                int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
                if (fd >= 0) {
                    char line[64];
                    int length = snprintf(line, sizeof line, "%s %ld\n", kind, count);
                    real_write(fd, line, length);
                    close(fd);
                }
            }
            return (int)setting(kind, "ERRNO", 5);
        }

        ssize_t write(int fd, const void *buffer, size_t count) {
            if (!real_write) real_write = dlsym(RTLD_NEXT, "write");
            if (is_segment(fd)) {
                int e = fault("WRITE", __atomic_add_fetch(&writes, 1, __ATOMIC_SEQ_CST));
                if (e) { errno = e; return -1; }
            }
            return real_write(fd, buffer, count);
        }

        int fsync(int fd) {
            if (!real_fsync) real_fsync = dlsym(RTLD_NEXT, "fsync");
            if (is_segment(fd)) {
                int e = fault("FSYNC", __atomic_add_fetch(&syncs, 1, __ATOMIC_SEQ_CST));
                if (e) { errno = e; return -1; }
            }
            return real_fsync(fd);
        }

        int fdatasync(int fd) {
            if (!real_fdatasync) real_fdatasync = dlsym(RTLD_NEXT, "fdatasync");
            if (is_segment(fd)) {
                int e = fault("FSYNC", __atomic_add_fetch(&syncs, 1, __ATOMIC_SEQ_CST));
                if (e) { errno = e; return -1; }
            }
            return real_fdatasync(fd);
        }
        """#

    /// The C compiler on PATH, if any.
    static let compiler: String? = {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin"
        for dir in path.split(separator: ":") {
            for name in ["cc", "gcc", "clang"] where FileManager.default.isExecutableFile(atPath: "\(dir)/\(name)") {
                return "\(dir)/\(name)"
            }
        }
        return nil
    }()

    /// The built shim's path, or why it could not be built.
    static let built: Result<String, ShimError> = {
        guard let compiler else { return .failure(ShimError("no C compiler (cc, gcc or clang) on PATH")) }
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("beacon-fault-shim-\(getpid())").path
        do {
            try FileManager.default.createDirectory(atPath: dir, withIntermediateDirectories: true)
            try Data(source.utf8).write(to: URL(fileURLWithPath: dir + "/shim.c"))
            let (ending, output) = try SpawnedProcess.run(compiler, ["-shared", "-fPIC", "-O1", "-o", dir + "/shim.so", dir + "/shim.c", "-ldl"])
            guard ending == .exited(0) else { return .failure(ShimError("\(compiler) could not build the shim (\(ending)): \(output)")) }
            return .success(dir + "/shim.so")
        } catch {
            return .failure(ShimError("building the shim failed: \(error)"))
        }
    }()

    static var available: Bool { (try? built.get()) != nil }
    static var unavailableReason: Comment {
        if case .failure(let error) = built { return Comment(rawValue: "SKIPPED, the fault shim is not tested: \(error.description)") }
        return ""
    }

    struct ShimError: Error, CustomStringConvertible {
        var description: String
        init(_ description: String) { self.description = description }
    }
}

/// `beacon append` with real write and fsync failures under it: the exit status, the resume line
/// it names, and that following its advice appends every line exactly once.
@Suite("beacon append under injected write and fsync errors", .enabled(if: FaultShim.available, FaultShim.unavailableReason), .blocking)
struct AppendFaultTests {
    /// One run: the `--sync` mode, which call fails (WRITE or FSYNC), the first failing call, the errno, and whether it keeps failing.
    struct Fault: CustomTestStringConvertible, Sendable {
        var sync: String
        var kind: String
        var at: Int
        var errno: Int32
        var persistent: Bool
        var testDescription: String { "--sync \(sync), \(kind) #\(at) fails with \(errno == ENOSPC ? "ENOSPC" : "EIO") \(persistent ? "from then on" : "once")" }
    }

    static let faults: [Fault] = {
        var faults: [Fault] = []
        for persistent in [false, true] {
            for at in [1, 2, 15, 200] { faults.append(Fault(sync: "each", kind: "WRITE", at: at, errno: ENOSPC, persistent: persistent)) }
            faults.append(Fault(sync: "each", kind: "WRITE", at: 15, errno: EIO, persistent: persistent))
            for at in [1, 15] { faults.append(Fault(sync: "each", kind: "FSYNC", at: at, errno: EIO, persistent: persistent)) }
            for sync in ["batch", "none"] {
                faults.append(Fault(sync: sync, kind: "WRITE", at: 1, errno: ENOSPC, persistent: persistent))
                faults.append(Fault(sync: sync, kind: "WRITE", at: 2, errno: EIO, persistent: persistent))
                faults.append(Fault(sync: sync, kind: "FSYNC", at: 1, errno: EIO, persistent: persistent))
            }
        }
        return faults
    }()

    /// 300 input lines, two of them not JSON (lines 41 and 42): those are refused, and still count
    /// among the handled lines for the resume point.
    static let input: [String] = (0..<300).map { i in i == 40 || i == 41 ? "not json \(i)" : #"{"k":\#(i)}"# }

    /// The valid lines among `lines`: what the log should hold for them.
    static func records(_ lines: ArraySlice<String>) -> [String] { lines.filter { $0.hasPrefix("{") } }

    @Test(arguments: faults)
    func resumePointIsExact(fault: Fault) throws {
        let shim = try FaultShim.built.get()
        try withTemporaryDirectory { dir in
            let shimLog = dir + ".shim"
            defer { try? FileManager.default.removeItem(atPath: shimLog) }
            // The retry window counts from the failing call's start: on a loaded machine a write or
            // fsync that took over 0.3 s left no time for a retry, and a fault that fires once
            // ended the run (74). A lasting fault still gives up after 0.3 s; one that fires once
            // is overcome by the first retry, 10 ms later, well within 60 s.
            let environment = [
                "LD_PRELOAD": shim, "BEACON_SHIM_LOG": shimLog, "BEACON_APPEND_RETRY_SECONDS": fault.persistent ? "0.3" : "60",
                "BEACON_SHIM_\(fault.kind)_AT": String(fault.at), "BEACON_SHIM_\(fault.kind)_ERRNO": String(fault.errno),
                "BEACON_SHIM_\(fault.kind)_PERSIST": fault.persistent ? "1" : "0",
            ]
            let run = try BeaconToolRunner.run(["append", dir, "--sync", fault.sync], stdin: stdinData(Self.input), environment: environment)
            let fired = FileManager.default.fileExists(atPath: shimLog)
            if fault.at == 1 || fault.sync == "each" { #expect(fired, "the fault never fired") }
            #expect(!run.stderr.contains("kept in memory") && !run.stderr.contains("do not append"), "advice for a process that keeps running: \(run.stderr)")
            let cat = try BeaconToolRunner.run(["cat", dir])
            #expect(cat.status == 0, "\(cat.stderr)")

            if !fired || !fault.persistent {
                // Nothing failed for good: a retry (or the rewrite after a failed fsync) wrote it all.
                #expect(run.status == 65, "exit \(run.status): \(run.stderr)")
                #expect(cat.stdoutLines == Self.records(Self.input[...]))
                return
            }
            #expect(run.status == 74, "exit \(run.status): \(run.stderr)")
            // "lines 1–N are durable; lines N+1… are not: re-run with `tail -n +N+1`"
            guard let resume = run.stderr.firstMatch(of: /re-run with `tail -n \+(\d+)`/).flatMap({ Int($0.output.1) }) else {
                Issue.record("no resume line in: \(run.stderr)")
                return
            }
            let durable = resume - 1
            #expect(resume == 1 ? run.stderr.contains("no input line is durable") : run.stderr.contains("lines 1–\(durable) are durable; lines \(resume)… are not"), "\(run.stderr)")
            #expect(cat.stdoutLines == Self.records(Self.input.prefix(durable)), "the log holds other than lines 1–\(durable): \(cat.stdoutLines.count) records; \(run.stderr)")
            // Following the advice, without the fault: every line exactly once, in order.
            let rest = try BeaconToolRunner.run(["append", dir, "--sync", fault.sync], stdin: stdinData(Array(Self.input.dropFirst(durable))))
            #expect(rest.status == 0 || rest.status == 65, "\(rest.stderr)")
            #expect(try BeaconToolRunner.run(["cat", dir]).stdoutLines == Self.records(Self.input[...]))
        }
    }
}

/// The resume point from the appender's own account: lines are durable up to the first record
/// that is not, refused lines included.
@Suite(.blocking) struct ResumePointTests {
    @Test func ledgerMapsRecordsToLinesAcrossRefusedLines() {
        var ledger = LineLedger()
        let lines = [1, 2, 3, 6, 7, 9, 10, 11, 20]  // lines 4, 5, 8, 12–19 were refused
        for line in lines { ledger.add(line: line) }
        #expect(ledger.records == lines.count)
        for (index, line) in lines.enumerated() { #expect(ledger.line(ofRecord: index) == line) }
    }

    @Test func adviceNamesTheFirstLineToFeedAgain() {
        #expect(LineAppender.resumeAdvice(durableLines: 0).contains("`tail -n +1`"))
        #expect(LineAppender.resumeAdvice(durableLines: 13) == "lines 1–13 are durable; lines 14… are not: re-run with `tail -n +14`")
    }
}
