import Foundation

/// A unique temporary directory path (not created: the log or the tool creates it), removed with
/// everything in it when `body` returns.
public func withTemporaryDirectory<T>(_ body: (String) throws -> T) throws -> T {
    let path = temporaryDirectoryPath()
    defer { try? FileManager.default.removeItem(atPath: path) }
    return try body(path)
}

/// ``withTemporaryDirectory(_:)`` for async test bodies.
public func withTrackerDirectory<T>(_ body: (String) async throws -> T) async rethrows -> T {
    let path = temporaryDirectoryPath()
    defer { try? FileManager.default.removeItem(atPath: path) }
    return try await body(path)
}

/// A new path under the system's temporary directory; nothing is created there.
public func temporaryDirectoryPath() -> String {
    FileManager.default.temporaryDirectory.appendingPathComponent("beacon-test-\(UUID().uuidString)").path
}
