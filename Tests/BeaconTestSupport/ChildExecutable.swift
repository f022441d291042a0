import Foundation

/// Where `swift build --build-tests` put `beacon-test-child`, the process crash tests start and
/// kill: next to the test bundle, or in the package's `.build/debug`, found by walking up from
/// this file.
public func childExecutablePath() throws -> String {
    var candidates: [String] = []
    let bundle = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    candidates.append(bundle.appendingPathComponent("beacon-test-child").path)
    var dir = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    while dir.path != "/" {
        candidates.append(dir.appendingPathComponent(".build/debug/beacon-test-child").path)
        dir = dir.deletingLastPathComponent()
    }
    guard let found = candidates.first(where: { FileManager.default.isExecutableFile(atPath: $0) }) else {
        throw ChildError("beacon-test-child not found (looked at \(candidates.prefix(3))); run `swift build --build-tests`")
    }
    return found
}

/// ``childExecutablePath()`` under the name the tracker's suites use.
public func testChildPath() throws -> String { try childExecutablePath() }

/// A child process that could not be found, started, or did not behave.
public struct ChildError: Error, CustomStringConvertible {
    public var description: String
    public init(_ description: String) { self.description = description }
}
