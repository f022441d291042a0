import Foundation

/// An open file of the log: a Foundation `FileHandle` plus the path it was opened from, for errors.
package final class LogFile: @unchecked Sendable {
    package let handle: FileHandle
    package let path: String
    package var descriptor: Int32 { handle.fileDescriptor }

    package init(handle: FileHandle, path: String) {
        self.handle = handle
        self.path = path
    }
}
