import Foundation
import Glibc

/// Makes a write to a pipe or socket whose reader is gone fail with `EPIPE` instead of killing
/// the whole test process with `SIGPIPE`: tests write to children's stdin, and a child may exit
/// (or be killed) before reading all of it. Process-wide; call it before starting a child.
public func ignoreBrokenPipes() {
    signal(SIGPIPE, SIG_IGN)
}

/// The path of the product `name` of this build: the directory of this process's own
/// executable (`/proc/self/exe`) holds every product of the build it belongs to, the test runner
/// (`BeaconPackageTests.xctest`), `beacon`, `beacon-test-child`, `beacon-bench` and
/// `beacon-chaos` alike, whatever the configuration (`-c release`) or scratch path
/// (`--scratch-path .build-asan`). Throws, saying what to build, when it is not there.
public func builtProduct(_ name: String) throws -> String {
    let path = builtProductPath(name)
    guard FileManager.default.isExecutableFile(atPath: path) else {
        throw ChildError("\(name) is not among this build's products (no \(path)); build it with this build's options, e.g. `swift build --build-tests` or `swift build -c release --product \(name)`")
    }
    return path
}

/// Where ``builtProduct(_:)`` looks for `name`, whether it is there or not.
public func builtProductPath(_ name: String) -> String {
    let executable = (try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/exe")) ?? CommandLine.arguments[0]
    return URL(fileURLWithPath: executable).deletingLastPathComponent().appendingPathComponent(name).path
}

/// Where the build put `beacon-test-child`, the process crash tests start and kill
/// (``builtProduct(_:)``; `swift build --build-tests` builds it).
public func childExecutablePath() throws -> String {
    ignoreBrokenPipes()
    return try builtProduct("beacon-test-child")
}

/// A child process that could not be found, started, or did not behave.
public struct ChildError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
