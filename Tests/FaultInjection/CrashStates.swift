import Foundation
import Glibc

/// One change a workload made to the file system, as `FaultyFileSystem` records it, or a marker
/// the workload put between them.
package enum RecordedOperation: Sendable, CustomStringConvertible {
    case create(String)
    case write(String, offset: UInt64, bytes: [UInt8])
    case truncate(String, size: UInt64)
    /// `fsync(2)` or `fdatasync(2)` of a file: its data is durable.
    case sync(String)
    case rename(String, String)
    case remove(String)
    case mkdir(String)
    /// `fsync(2)` of a directory: its entries (creations, renames, removals) are durable.
    case syncDirectory(String)
    case mark(Marker)

    /// What the workload learned from the API at this point.
    package enum Marker: Sendable {
        /// `append` returned `seq` for `record`.
        case appended(seq: UInt64, record: [UInt8])
        /// The API promised that every record up to `seq` is durable (an `.everyRecord` append,
        /// `sync()` or `close()` returned).
        case durable(through: UInt64)
        /// `acknowledge(through:)` is called with a position whose next seq is `seq`.
        case acknowledging(seq: UInt64)
        /// ... and returned: records before `seq` must never be delivered again.
        case acknowledged(seq: UInt64)
    }

    package var isSync: Bool {
        switch self {
        case .sync, .syncDirectory: true
        default: false
        }
    }

    package var description: String {
        func name(_ path: String) -> String { (path as NSString).lastPathComponent }
        switch self {
        case .create(let p): return "create \(name(p))"
        case .write(let p, let offset, let bytes): return "write \(name(p)) @\(offset) +\(bytes.count)"
        case .truncate(let p, let size): return "truncate \(name(p)) \(size)"
        case .sync(let p): return "fsync \(name(p))"
        case .rename(let a, let b): return "rename \(name(a)) \(name(b))"
        case .remove(let p): return "unlink \(name(p))"
        case .mkdir(let p): return "mkdir \(name(p))"
        case .syncDirectory(let p): return "fsync dir \(name(p))"
        case .mark(let m): return "mark \(m)"
        }
    }
}

/// The crash states of a recorded workload, rebuilt on disk, in the manner of ALICE (OSDI '14)
/// and CrashMonkey (OSDI '18).
///
/// A model file system replays the recorded changes. A **process crash** after the first `n`
/// changes keeps everything written (the page cache survives). A **power loss** at a sync
/// boundary keeps, for each file, the data of its last fsync plus the unsynced changes treated as
/// one ``PowerLoss`` variant, and for each directory the entries of its last directory fsync: a
/// created, renamed or removed entry survives only if its directory was fsynced after it. That
/// holds for directories too: a directory made by `mkdir` is lost, with everything in it, unless
/// its parent was fsynced after the `mkdir`.
package struct CrashStates {
    /// What happens to a file's writes since its last fsync at a power loss.
    package enum PowerLoss: Sendable, Hashable, CustomStringConvertible {
        /// All of them are lost.
        case dropped
        /// The first `n` survive (in the order made), the rest are lost.
        case prefix(Int)
        /// Everything is written up to byte offset `at` (a multiple of 512, a sector), nothing beyond.
        case sectorCut(at: Int)
        /// The file keeps its new size but the unsynced bytes read as zeros (ext4's delayed allocation).
        case zeroFilled

        package var description: String {
            switch self {
            case .dropped: "unsynced writes dropped"
            case .prefix(let n): "first \(n) unsynced writes kept"
            case .sectorCut(let at): "unsynced writes cut at byte \(at)"
            case .zeroFilled: "unsynced writes zero-filled"
            }
        }
    }

    /// Where a state comes from.
    package enum Crash: Sendable, CustomStringConvertible {
        /// A process crash after `changes` changes.
        case process(changes: Int)
        /// A power loss after `changes` changes (the last one a sync).
        case power(changes: Int, PowerLoss)

        package var changes: Int {
            switch self {
            case .process(let n), .power(let n, _): n
            }
        }

        package var description: String {
            switch self {
            case .process(let n): "process crash after change \(n)"
            case .power(let n, let loss): "power loss after change \(n), \(loss)"
            }
        }
    }

    final class Inode {
        var data: [UInt8]
        var durable: [UInt8]
        var unsynced: [RecordedOperation] = []
        init(_ bytes: [UInt8] = []) { data = bytes; durable = bytes }
    }

    enum Entry { case file(Inode), directory }

    /// The entries of each directory by path relative to the root ("" is the root).
    var entries: [String: [String: Entry]] = ["": [:]]
    var durableEntries: [String: [String: Entry]] = ["": [:]]
    package let root: String
    package private(set) var operations: [RecordedOperation] = []

    /// A model of `root` as it is now, everything in it taken as durable. Take it before the
    /// workload runs, then add what was recorded with ``after(_:)``.
    package init(root: String) throws {
        self.root = root
        try snapshot("")
        durableEntries = entries
    }

    /// This starting state followed by `operations`.
    package func after(_ operations: [RecordedOperation]) -> CrashStates {
        var model = self
        model.operations = operations
        return model
    }

    /// A copy whose files are its own (replaying changes them).
    private func copy() -> CrashStates {
        var copies: [ObjectIdentifier: Inode] = [:]
        func copied(_ table: [String: [String: Entry]]) -> [String: [String: Entry]] {
            table.mapValues { directory in
                directory.mapValues { entry in
                    guard case .file(let inode) = entry else { return entry }
                    if let done = copies[ObjectIdentifier(inode)] { return .file(done) }
                    let new = Inode(inode.durable)
                    new.data = inode.data
                    new.unsynced = inode.unsynced
                    copies[ObjectIdentifier(inode)] = new
                    return .file(new)
                }
            }
        }
        var model = self
        model.entries = copied(entries)
        model.durableEntries = copied(durableEntries)
        return model
    }

    private mutating func snapshot(_ relative: String) throws {
        let path = relative.isEmpty ? root : root + "/" + relative
        entries[relative] = [:]
        for name in try FileManager.default.contentsOfDirectory(atPath: path) {
            let child = relative.isEmpty ? name : relative + "/" + name
            var isDirectory: ObjCBool = false
            _ = FileManager.default.fileExists(atPath: root + "/" + child, isDirectory: &isDirectory)
            if isDirectory.boolValue {
                entries[relative]![name] = .directory
                try snapshot(child)
            } else {
                entries[relative]![name] = .file(Inode(Array(try Data(contentsOf: URL(fileURLWithPath: root + "/" + child)))))
            }
        }
    }

    /// The indices (change counts) after which a power loss is modelled: after each sync, and at the end.
    package var syncBoundaries: [Int] {
        var boundaries = operations.indices.filter { operations[$0].isSync }.map { $0 + 1 }
        if boundaries.last != operations.count { boundaries.append(operations.count) }
        return boundaries
    }

    /// The markers recorded among the first `changes` changes.
    package func markers(before changes: Int) -> [RecordedOperation.Marker] {
        operations.prefix(changes).compactMap { if case .mark(let m) = $0 { m } else { nil } }
    }

    /// Every marker of the workload.
    package var allMarkers: [RecordedOperation.Marker] { markers(before: operations.count) }

    /// The most unsynced writes any file holds at a power loss after `changes` changes.
    package func unsyncedWrites(after changes: Int) -> (count: Int, bytes: Int) {
        var model = copy()
        model.replay(changes)
        let inodes = model.allInodes()
        return (inodes.map(\.unsynced.count).max() ?? 0, inodes.map(\.data.count).max() ?? 0)
    }

    /// Writes `crash`'s state into the new directory `destination` (which then stands for `root`).
    package func rebuild(_ crash: Crash, into destination: String) throws {
        var model = copy()
        model.replay(crash.changes)
        try FileManager.default.createDirectory(atPath: destination, withIntermediateDirectories: true, attributes: [.posixPermissions: 0o700])
        switch crash {
        case .process:
            try model.write("", entries: model.entries, into: destination) { $0.data }
        case .power(_, let loss):
            try model.write("", entries: model.durableEntries, into: destination) { Self.content(of: $0, after: loss) }
        }
    }

    private func allInodes() -> [Inode] {
        var seen = Set<ObjectIdentifier>()
        var inodes: [Inode] = []
        for table in [entries, durableEntries] {
            for directory in table.values {
                for case .file(let inode) in directory.values where seen.insert(ObjectIdentifier(inode)).inserted { inodes.append(inode) }
            }
        }
        return inodes
    }

    private func write(_ relative: String, entries table: [String: [String: Entry]], into destination: String, content: (Inode) -> [UInt8]) throws {
        for (name, entry) in table[relative] ?? [:] {
            let child = relative.isEmpty ? name : relative + "/" + name
            let path = destination + "/" + child
            switch entry {
            case .directory:
                try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: false, attributes: [.posixPermissions: 0o700])
                try write(child, entries: table, into: destination, content: content)
            case .file(let inode):
                guard FileManager.default.createFile(atPath: path, contents: Data(content(inode)), attributes: [.posixPermissions: 0o600]) else {
                    throw CocoaError(.fileWriteUnknown, userInfo: [NSFilePathErrorKey: path])
                }
            }
        }
    }

    /// A file's content after a power loss: its durable bytes and its unsynced writes as `loss` says.
    static func content(of inode: Inode, after loss: PowerLoss) -> [UInt8] {
        switch loss {
        case .dropped:
            return inode.durable
        case .prefix(let n):
            var bytes = inode.durable
            for operation in inode.unsynced.prefix(n) { apply(operation, to: &bytes) }
            return bytes
        case .sectorCut(let at):
            let old = inode.durable, new = inode.data
            var bytes = Array(new.prefix(max(at, 0)))
            if bytes.count < old.count { bytes += old[bytes.count...] }
            return bytes
        case .zeroFilled:
            let old = inode.durable, new = inode.data
            return new.indices.map { $0 < old.count && old[$0] == new[$0] ? new[$0] : 0 }
        }
    }

    static func apply(_ operation: RecordedOperation, to bytes: inout [UInt8]) {
        switch operation {
        case .write(_, let offset, let data):
            let start = Int(offset)
            if bytes.count < start + data.count { bytes += [UInt8](repeating: 0, count: start + data.count - bytes.count) }
            bytes.replaceSubrange(start..<(start + data.count), with: data)
        case .truncate(_, let size):
            let size = Int(size)
            if bytes.count > size { bytes.removeLast(bytes.count - size) } else { bytes += [UInt8](repeating: 0, count: size - bytes.count) }
        default:
            break
        }
    }

    private func split(_ path: String) -> (directory: String, name: String)? {
        guard path.hasPrefix(root + "/") else { return nil }
        let relative = String(path.dropFirst(root.count + 1))
        guard let slash = relative.lastIndex(of: "/") else { return ("", relative) }
        return (String(relative[..<slash]), String(relative[relative.index(after: slash)...]))
    }

    private func relative(_ path: String) -> String? {
        if path == root { return "" }
        guard path.hasPrefix(root + "/") else { return nil }
        return String(path.dropFirst(root.count + 1))
    }

    private func inode(_ path: String) -> Inode? {
        guard let (directory, name) = split(path), case .file(let inode)? = entries[directory]?[name] else { return nil }
        return inode
    }

    mutating func replay(_ changes: Int) {
        for operation in operations.prefix(changes) {
            switch operation {
            case .create(let path):
                guard let (directory, name) = split(path) else { continue }
                entries[directory, default: [:]][name] = .file(Inode())
            case .write(let path, _, _), .truncate(let path, _):
                guard let inode = inode(path) else { continue }
                Self.apply(operation, to: &inode.data)
                inode.unsynced.append(operation)
            case .sync(let path):
                guard let inode = inode(path) else { continue }
                inode.durable = inode.data
                inode.unsynced = []
            case .rename(let from, let to):
                guard let (d1, n1) = split(from), let (d2, n2) = split(to), let entry = entries[d1]?[n1] else { continue }
                entries[d1]![n1] = nil
                entries[d2, default: [:]][n2] = entry
            case .remove(let path):
                guard let (directory, name) = split(path) else { continue }
                entries[directory]?[name] = nil
            case .mkdir(let path):
                guard let (directory, name) = split(path), let child = relative(path) else { continue }
                entries[directory, default: [:]][name] = .directory
                entries[child] = [:]
            case .syncDirectory(let path):
                guard let directory = relative(path) else { continue }
                durableEntries[directory] = entries[directory] ?? [:]
            case .mark:
                break
            }
        }
    }
}
