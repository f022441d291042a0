import Foundation

/// The bytes of the file at `path` (empty for an empty file), or nil when it cannot be opened.
///
/// Tests read files with this rather than `FileManager.contents(atPath:)`: swift-foundation's
/// `readBytesFromFile` leaks the 4 KiB buffer it allocates for every empty file it reads (a
/// tool's standard error when nothing went wrong), which LeakSanitizer reports in the suite under
/// AddressSanitizer (.ci/run).
public func fileContents(atPath path: String) -> Data? {
    guard let handle = FileHandle(forReadingAtPath: path) else { return nil }
    defer { try? handle.close() }
    return (try? handle.readToEnd()) ?? Data()
}
