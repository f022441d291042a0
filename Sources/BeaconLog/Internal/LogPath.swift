/// A file of a log directory: the directory's descriptor and the file's name in it. Its
/// ``path`` (`directory/name`) is for messages, the fault seam's journal and the crash-state
/// model; the system calls use the descriptor and the name.
package struct LogPath: Sendable, CustomStringConvertible {
    package let directory: LogDirectory
    package let name: String

    package init(directory: LogDirectory, name: String) {
        self.directory = directory
        self.name = name
    }

    /// `directory/name`.
    package var path: String { directory.path == "/" ? "/" + name : directory.path + "/" + name }
    package var description: String { path }

    /// This file's name with `suffix` added, in the same directory: `checkpoint` → `checkpoint.tmp`.
    package func appending(_ suffix: String) -> LogPath { LogPath(directory: directory, name: name + suffix) }
}
