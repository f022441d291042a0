import Foundation

/// Loss counters that outlive the process, so that `beacon status` and a restarted service still
/// report what was dropped, refused or skipped (nothing is lost without being counted).
///
/// The writer keeps `writer.counters` (dropped and refused records), the reader
/// `reader.counters` (corrupt records passed over). They are small JSON files replaced atomically
/// at most once a second after a change and on close, through the file-system seam. They are
/// diagnostics, not data: they are not fsynced, and a missing or damaged file counts as zeros.
struct PersistedCounters: Codable, Equatable, Sendable {
    var dropped: [DropReason: UInt64] = [:]
    var refused: [RefusalReason: UInt64] = [:]
    var skippedCorrupt: UInt64 = 0
    var skippedCorruptByReason: [CorruptionReason: UInt64] = [:]
    /// The furthest position at which a corrupt record was counted (`[segment, offset]`), so that
    /// reading it again after a restart does not count it twice.
    var corruptCountedThrough: [UInt64]?
    /// The reader's: records the writer's quota counted in `dropped[.quotaDeleted]` that were
    /// delivered after all (read before the drop, acknowledged after it). What is reported as
    /// dropped is the writer's count minus this one (see `reportedDropped`).
    var deliveredAfterDrop: UInt64 = 0
    /// The reader's: records the writer's quota counted in `dropped[.quotaDeleted]` that a sender
    /// had sent without recording the answer: reported as `dropped[.quotaInDoubt]` instead.
    var inDoubtAfterDrop: UInt64 = 0
    /// The reader's: the seq below which the quota's drops are settled (see `State.dropSettledThrough`).
    var dropSettledThrough: UInt64 = 0

    enum CodingKeys: String, CodingKey {
        case deliveredAfterDrop = "quota_deleted_delivered"
        case inDoubtAfterDrop = "quota_deleted_in_doubt"
        case dropSettledThrough = "quota_settled_through"
        case dropped, refused
        case skippedCorrupt = "skipped_corrupt"
        case skippedCorruptByReason = "skipped_corrupt_by_reason"
        case corruptCountedThrough = "corrupt_counted_through"
    }

    init(dropped: [DropReason: UInt64] = [:], refused: [RefusalReason: UInt64] = [:], skippedCorrupt: UInt64 = 0, skippedCorruptByReason: [CorruptionReason: UInt64] = [:]) {
        self.dropped = dropped
        self.refused = refused
        self.skippedCorrupt = skippedCorrupt
        self.skippedCorruptByReason = skippedCorruptByReason
    }

    /// Every key is optional: a file written by an older version lacks the newer ones. Counts are
    /// stored by the reason's name; a name this version does not know is left out.
    init(from decoder: any Decoder) throws {
        let c = try decoder.container(keyedBy: CodingKeys.self)
        func counts<Reason>(_ key: CodingKeys, _ reason: (String) -> Reason?) throws -> [Reason: UInt64] {
            let stored = try c.decodeIfPresent([String: UInt64].self, forKey: key) ?? [:]
            var typed: [Reason: UInt64] = [:]
            for (name, count) in stored { if let r = reason(name) { typed[r, default: 0] += count } }
            return typed
        }
        dropped = try counts(.dropped, DropReason.init(name:))
        refused = try counts(.refused, RefusalReason.init(name:))
        skippedCorrupt = try c.decodeIfPresent(UInt64.self, forKey: .skippedCorrupt) ?? 0
        skippedCorruptByReason = try counts(.skippedCorruptByReason, CorruptionReason.init(name:))
        corruptCountedThrough = try c.decodeIfPresent([UInt64].self, forKey: .corruptCountedThrough)
        deliveredAfterDrop = try c.decodeIfPresent(UInt64.self, forKey: .deliveredAfterDrop) ?? 0
        inDoubtAfterDrop = try c.decodeIfPresent(UInt64.self, forKey: .inDoubtAfterDrop) ?? 0
        dropSettledThrough = try c.decodeIfPresent(UInt64.self, forKey: .dropSettledThrough) ?? 0
    }

    /// The drops as reported: the quota's count less what the reader delivered of it after all,
    /// and less what it had sent without recording the answer, which is reported as in doubt.
    var reportedDropped: [DropReason: UInt64] {
        var reported = dropped
        if let quota = reported[.quotaDeleted] {
            let delivered = min(quota, deliveredAfterDrop)
            let inDoubt = min(quota - delivered, inDoubtAfterDrop)
            reported[.quotaDeleted] = quota - delivered - inDoubt
            if inDoubt > 0 { reported[.quotaInDoubt, default: 0] += inDoubt }
        }
        return reported
    }

    func encode(to encoder: any Encoder) throws {
        var c = encoder.container(keyedBy: CodingKeys.self)
        try c.encode(Dictionary(uniqueKeysWithValues: dropped.map { ($0.key.name, $0.value) }), forKey: .dropped)
        try c.encode(Dictionary(uniqueKeysWithValues: refused.map { ($0.key.name, $0.value) }), forKey: .refused)
        try c.encode(skippedCorrupt, forKey: .skippedCorrupt)
        try c.encode(Dictionary(uniqueKeysWithValues: skippedCorruptByReason.map { ($0.key.name, $0.value) }), forKey: .skippedCorruptByReason)
        try c.encodeIfPresent(corruptCountedThrough, forKey: .corruptCountedThrough)
        if deliveredAfterDrop > 0 { try c.encode(deliveredAfterDrop, forKey: .deliveredAfterDrop) }
        if inDoubtAfterDrop > 0 { try c.encode(inDoubtAfterDrop, forKey: .inDoubtAfterDrop) }
        if dropSettledThrough > 0 { try c.encode(dropSettledThrough, forKey: .dropSettledThrough) }
    }

    static func file(_ kind: BeaconLog.LockKind, in directory: LogDirectory) -> LogPath {
        directory.file(kind.rawValue + ".counters")
    }

    static func path(_ kind: BeaconLog.LockKind, directory: String) -> String {
        file(kind, in: LogDirectory(directory)).path
    }

    /// The counters in the directory at `directory` (for tools and tests without an open log).
    static func load(directory: String, fileSystem: any FileSystem) -> PersistedCounters {
        load(directory: LogDirectory(directory), fileSystem: fileSystem)
    }

    /// The counters in the directory: the writer's and the reader's files merged.
    static func load(directory: LogDirectory, fileSystem: any FileSystem) -> PersistedCounters {
        var merged = PersistedCounters()
        for kind in [BeaconLog.LockKind.writer, .reader] {
            guard let bytes = (try? fileSystem.contents(ofFile: file(kind, in: directory), attempts: 2)) ?? nil,
                  let counters = try? JSONDecoder().decode(PersistedCounters.self, from: Data(bytes)),
                  counters.isPlausible else { continue }
            if kind == .writer {
                merged.dropped = counters.dropped
                merged.refused = counters.refused
            } else {
                merged.skippedCorrupt = counters.skippedCorrupt
                merged.skippedCorruptByReason = counters.skippedCorruptByReason
                merged.corruptCountedThrough = counters.corruptCountedThrough
                merged.deliveredAfterDrop = counters.deliveredAfterDrop
                merged.inDoubtAfterDrop = counters.inDoubtAfterDrop
                merged.dropSettledThrough = counters.dropSettledThrough
            }
        }
        return merged
    }

    /// Whether every count is below 2^62: a larger one was never counted (it would overflow the
    /// counting that goes on from it), so the file is damaged and counts as zeros.
    var isPlausible: Bool {
        let limit: UInt64 = 1 << 62
        return skippedCorrupt < limit && deliveredAfterDrop < limit && inDoubtAfterDrop < limit && (Array(dropped.values) + Array(refused.values) + Array(skippedCorruptByReason.values)).allSatisfy { $0 < limit }
    }

    /// Replaces the `kind` file with the counters that role owns. Best effort.
    func save(_ kind: BeaconLog.LockKind, directory: LogDirectory, fileSystem: any FileSystem) {
        var owned = PersistedCounters()
        if kind == .writer {
            owned.dropped = dropped
            owned.refused = refused
        } else {
            owned.skippedCorrupt = skippedCorrupt
            owned.skippedCorruptByReason = skippedCorruptByReason
            owned.corruptCountedThrough = corruptCountedThrough
            owned.deliveredAfterDrop = deliveredAfterDrop
            owned.inDoubtAfterDrop = inDoubtAfterDrop
            owned.dropSettledThrough = dropSettledThrough
        }
        let encoder = JSONEncoder()
        encoder.outputFormatting = .sortedKeys
        guard let data = try? encoder.encode(owned) else { return }
        try? fileSystem.replaceFile(Self.file(kind, in: directory), with: Array(data), durably: false)
    }
}

extension BeaconLog {
    /// Notes that a loss counter changed (call with the state locked): saves them within a second.
    func countersChanged(_ s: inout State) {
        s.countersDirty = true
        if s.countersSaveScheduled || s.closed { return }
        s.countersSaveScheduled = true
        TimerThread.shared.add(after: .seconds(1)) { [self] in flushLane.async { [self] in saveCounters() } }
    }

    /// Saves the counters this instance owns if they changed.
    ///
    /// One save at a time, from taking the snapshot to replacing the files: a save scheduled in
    /// the background and `close()`'s own would otherwise share the `.tmp` file, and the one with
    /// the older snapshot could replace the file last.
    func saveCounters() {
        countersSaving.withLock { _ in saveCountersNow() }
    }

    private func saveCountersNow() {
        let counters = state.withLock { s -> PersistedCounters? in
            s.countersSaveScheduled = false
            guard s.countersDirty else { return nil }
            s.countersDirty = false
            var counters = PersistedCounters(dropped: s.stats.dropped, refused: s.stats.refused, skippedCorrupt: s.stats.skippedCorrupt, skippedCorruptByReason: s.stats.skippedCorruptByReason)
            counters.corruptCountedThrough = s.corruptCountedThrough.map { [$0.segment, $0.offset] }
            counters.deliveredAfterDrop = s.deliveredAfterDrop
            counters.inDoubtAfterDrop = s.inDoubtAfterDrop
            counters.dropSettledThrough = s.dropSettledThrough
            return counters
        }
        guard let counters else { return }
        if canWrite { counters.save(.writer, directory: directory, fileSystem: fs) }
        if canAcknowledge { counters.save(.reader, directory: directory, fileSystem: fs) }
    }
}
