import Glibc

/// Whole-file operations built from the ``FileSystem`` primitives, so that every file Beacon
/// writes beside the segments (the checkpoint's first copy, `rejected.jsonl`, `delivery.inflight`,
/// `identity.json`, the counters) goes through the same calls a test can fault.
extension FileSystem {
    /// The content of an open file from `offset` (default: the whole file): `fstat(2)`, then
    /// `pread(2)` until its end.
    package func readAll(_ file: LogFile, from offset: UInt64 = 0) throws -> [UInt8] {
        let total = try self.size(file)
        let size = total > offset ? Int(total - offset) : 0
        var bytes = [UInt8](repeating: 0, count: size)
        var done = 0
        try bytes.withUnsafeMutableBytes { raw in
            while done < size {
                let n = try read(file, into: UnsafeMutableRawBufferPointer(rebasing: raw[done...]), at: offset + UInt64(done))
                if n == 0 { break }
                done += n
            }
        }
        if done < size { bytes.removeLast(size - done) }
        return bytes
    }

    /// The content of the file, or nil if there is no such file. A link in its place throws
    /// ``BeaconLogError/Code/linkedFile``, anything but a regular file
    /// ``BeaconLogError/Code/notRegularFile``, at once (never retried).
    ///
    /// Small files whose loss would cost something (the identity, the loss counters) are read
    /// with `attempts: 2`, so that one transient read error does not make them look missing.
    ///
    /// ```swift
    /// let bytes = try fs.contents(ofFile: directory.file("identity.json"), attempts: 2)
    /// ```
    ///
    /// - Parameters:
    ///   - path: the file to read.
    ///   - attempts: how many times to try before throwing the last error (default 1).
    package func contents(ofFile path: LogPath, attempts: Int = 1) throws -> [UInt8]? {
        var attempt = 1
        while true {
            do {
                let file: LogFile
                do {
                    file = try open(path, .read)
                } catch let error as BeaconLogError where error.errno == ENOENT {
                    return nil
                }
                defer { close(file) }
                return try readAll(file)
            } catch let error as BeaconLogError where error.code == .linkedFile || error.code == .notRegularFile {
                throw error
            } catch where attempt < attempts {
                attempt += 1
            }
        }
    }

    /// Replaces the file with `bytes` atomically: a crash leaves the old content or the
    /// new one, never a mix.
    ///
    /// Writes `path.tmp` (mode 0600, `pwrite(2)` until done), `fsync(2)`s it, `rename(2)`s it
    /// over `path` (replacing a link there, never writing through it) and `fsync(2)`s the directory, so the new content is durable when this returns.
    /// With `durably: false` both fsyncs are left out (for diagnostics and hints, which may be lost
    /// or empty after a power loss, never torn by a process crash). On failure the temporary file
    /// is removed and `path` is untouched.
    ///
    /// ```swift
    /// try fs.replaceFile(directory.file("identity.json"), with: bytes)
    /// ```
    ///
    /// - Parameters:
    ///   - path: the file to replace (created if missing).
    ///   - bytes: its new content.
    ///   - durably: fsync the file and its directory (default true).
    package func replaceFile(_ path: LogPath, with bytes: [UInt8], durably: Bool = true) throws {
        let temporary = path.appending(".tmp")
        try remove(temporary)
        let file = try open(temporary, .createNew)
        do {
            defer { close(file) }
            try bytes.withUnsafeBytes { try write(file, $0, at: 0) }
            if durably { try sync(file) }
        } catch {
            try? remove(temporary)
            throw error
        }
        do {
            try rename(temporary, to: path)
        } catch {
            try? remove(temporary)
            throw error
        }
        if durably { try syncDirectory(path.directory) }
    }

    /// Appends `bytes` to the file (created with mode 0600 if missing) and makes them
    /// durable: `write(2)` at the end, `fsync(2)`, and an `fsync(2)` of the directory when the file
    /// was created.
    ///
    /// All or nothing for the caller: on failure the file is cut back to its previous size (or
    /// removed, if this call created it), so a retry neither duplicates a line nor appends after
    /// half of one.
    ///
    /// ```swift
    /// try fs.appendDurably(directory.file("rejected.jsonl"), line)
    /// ```
    package func appendDurably(_ path: LogPath, _ bytes: [UInt8]) throws {
        let created = try fileSize(path) == nil
        let file = try open(path, created ? .createNew : .readWrite)
        do {
            defer { close(file) }
            let before = try size(file)
            do {
                try bytes.withUnsafeBytes { try write(file, $0, at: before) }
                try sync(file)
            } catch {
                if !created { try? truncate(file, to: before) }
                throw error
            }
        } catch {
            if created { try? remove(path) }
            throw error
        }
        if created {
            do {
                try syncDirectory(path.directory)
            } catch {
                try? remove(path)
                throw error
            }
        }
    }
}
