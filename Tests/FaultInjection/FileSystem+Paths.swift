import BeaconLog

/// Plain-path forms of the ``FileSystem`` calls, for tests that work on files outside a log
/// (`/dev/full`, the crash-state explorer's own checks): the file's directory is opened for the
/// call (`O_NOFOLLOW` on its last component), then the call goes through the seam as usual.
extension FileSystem {
    package func open(_ path: String, _ mode: OpenMode) throws -> LogFile {
        try open(logPath(path), mode)
    }

    package func replaceFile(_ path: String, with bytes: [UInt8], durably: Bool = true) throws {
        try replaceFile(logPath(path), with: bytes, durably: durably)
    }
}

/// `path` as its directory and its last component.
package func logPath(_ path: String) -> LogPath {
    let name = path.split(separator: "/").last.map(String.init) ?? path
    return LogDirectory(parentDirectory(of: path)).file(name)
}
