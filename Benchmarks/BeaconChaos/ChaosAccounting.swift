/// The accounting at the end of a run, both ways, for one source: every produced event was
/// delivered, or counted as dropped, or set aside with a true reason; nothing counted as lost or
/// set aside was delivered; first arrivals in log order; bytes unchanged; duplicates within the
/// documented bound.
enum ChaosAccounting {
    /// `--tolerate-known-open`: the two findings issue 26 still has open (first arrivals out of
    /// log order while a front event is isolated; the quota's count above what was not delivered)
    /// are printed as known open instead of failing the run. Every other check still fails it.
    nonisolated(unsafe) static var tolerateKnownOpen = false

    /// One line of `rejected.jsonl`.
    struct SetAside {
        var id: UInt64
        var status: Int?
        var reason: String
        /// `rejected_at`, milliseconds since 1970.
        var at: Int64 = 0
        var line: String
    }

    /// What `beacon append` said it dropped, and whether it called them never delivered.
    struct ToolCount {
        var dropped = 0
        var saysNeverDelivered = false
    }

    struct Result {
        var source: ChaosSource
        var produced = 0
        var delivered = 0
        /// Delivered events that were not surely produced (a tracker's last block before a kill).
        var deliveredUnsure = 0
        /// The log's counters of lost events (quota and the like), from `beacon status --json`.
        var dropped = 0
        var setAside = 0
        var duplicateEvents = 0
        var duplicateRequests = 0
        var duplicateBound = 0
        var poisonProduced = 0
        var problems: [String] = []
        /// Findings of the two known open defects, when tolerated (``tolerateKnownOpen``).
        var knownOpen: [String] = []

        var summary: String {
            "\(source): produced=\(produced) delivered=\(delivered)\(deliveredUnsure > 0 ? "(+\(deliveredUnsure) of the unsure)" : "") dropped=\(dropped) set_aside=\(setAside) (poison produced \(poisonProduced)) duplicates=\(duplicateEvents) in \(duplicateRequests) requests (bound \(duplicateBound))"
        }
    }

    static func account(_ source: ChaosSource, events: ChaosEvents, produced ranges: [Range<UInt64>], maybe: [Range<UInt64>],
                        arrivals: ChaosCollector.Arrivals, status: [String: Any], rejected: [SetAside],
                        outages: [ClosedRange<Int64>] = [], toolDropped: ToolCount? = nil, interruptions: Int, maxBatch: Int) -> Result {
        var result = Result(source: source)
        func problem(_ text: String) { result.problems.append("\(source): \(text)") }
        func knownOpen(_ text: String) {
            if tolerateKnownOpen { result.knownOpen.append("\(source): \(text)") } else { problem(text) }
        }
        func list(_ ids: some Collection<UInt64>) -> String {
            ids.sorted().prefix(10).map(String.init).joined(separator: ", ") + (ids.count > 10 ? "…" : "")
        }
        var produced = Set<UInt64>()
        for range in ranges { produced.formUnion(range) }
        var unsure = Set<UInt64>()
        for range in maybe where !range.isEmpty { unsure.formUnion(range) }
        unsure.subtract(produced)
        result.produced = produced.count
        result.poisonProduced = produced.filter { events.isPoison($0, source) }.count

        // Delivered: nothing that was not produced; first arrivals in log (id) order.
        let delivered = arrivals.seen
        let phantom = delivered.subtracting(produced).subtracting(unsure)
        if !phantom.isEmpty { problem("\(phantom.count) delivered events were never produced: ids \(list(phantom))") }
        result.delivered = delivered.intersection(produced).count
        result.deliveredUnsure = delivered.intersection(unsure).count
        var firsts = Set<UInt64>()
        var last: UInt64?
        var outOfOrder = 0
        var example = ""
        for id in arrivals.ids where firsts.insert(id).inserted {
            if let last, id < last {
                outOfOrder += 1
                if example.isEmpty { example = "id \(id) arrived first after id \(last)" }
            }
            last = max(last ?? id, id)
        }
        if outOfOrder > 0 { knownOpen("\(outOfOrder) events arrived first out of log order (\(example))") }
        if arrivals.byteMismatches > 0 {
            problem("\(arrivals.byteMismatches) delivered events differ from the bytes produced: \(arrivals.mismatchExamples.joined(separator: "; "))")
        }

        // Set aside: only poison events, with the collector's 400, and never delivered.
        var setAside = Set<UInt64>()
        for entry in rejected {
            guard setAside.insert(entry.id).inserted else {
                problem("id \(entry.id) is set aside twice in rejected.jsonl")
                continue
            }
            if !produced.contains(entry.id) && !unsure.contains(entry.id) { problem("set aside id \(entry.id) was never produced: \(entry.line)") }
            if let outage = outages.first(where: { $0.contains(entry.at) }) {
                problem("id \(entry.id) was set aside during an outage (the collector's port was closed from \(outage.lowerBound) to \(outage.upperBound == Int64.max ? "the end" : String(outage.upperBound)) ms): \(entry.line)")
            }
            if !events.isPoison(entry.id, source) {
                problem("id \(entry.id) was set aside though the collector never refused it alone (not a poison event): \(entry.line)")
            } else if entry.status != 400 {
                problem("poison id \(entry.id) was set aside with status \(entry.status.map(String.init) ?? "null"), not the collector's 400: \(entry.line)")
            }
        }
        result.setAside = setAside.count
        let setAsideDelivered = setAside.intersection(delivered)
        if !setAsideDelivered.isEmpty { problem("\(setAsideDelivered.count) events set aside were also delivered: ids \(list(setAsideDelivered))") }

        // Dropped: the log's loss counters against what neither arrived nor was set aside.
        let droppedByReason = (status["dropped"] as? [String: Any] ?? [:]).compactMapValues { $0 as? Int }
        let setAsideCounters: Set<String> = ["rejected", "expired"]
        result.dropped = droppedByReason.filter { !setAsideCounters.contains($0.key) }.values.reduce(0, +)
        let missing = produced.subtracting(delivered).subtracting(setAside)
        if missing.count > result.dropped {
            problem("\(missing.count - result.dropped) events lost without being counted: \(missing.count) produced events were neither delivered nor set aside, and the log counts \(result.dropped) as dropped \(droppedByReason); missing ids \(list(missing))")
        } else if missing.count < result.dropped {
            knownOpen("the log counts \(result.dropped) events as dropped \(droppedByReason), but only \(missing.count) produced events were neither delivered nor set aside: \(result.dropped - missing.count) counted as dropped were delivered")
        }
        if let toolDropped, toolDropped.saysNeverDelivered ? toolDropped.dropped != missing.count : toolDropped.dropped < missing.count {
            problem("beacon append said it dropped \(toolDropped.dropped) records\(toolDropped.saysNeverDelivered ? " (\"never delivered\")" : ""), but \(missing.count) produced events were neither delivered nor set aside")
        }
        if let counted = droppedByReason["rejected"], counted != setAside.count {
            problem("the log counts \(counted) events as rejected, rejected.jsonl holds \(setAside.count)")
        }
        if let corrupt = status["corrupt_skipped"] as? Int, corrupt > 0 {
            problem("the log passed over \(corrupt) records as corrupt (\(status["corrupt_skipped_by_reason"] ?? "")): no record here was damaged")
        }
        if let pending = status["pending_records"] as? Int, pending > 0 { problem("\(pending) records still pending after the drain") }

        // Duplicates: each interruption (a kill, a stop, a term, the collector going down) may
        // re-send the batch in flight, at most `maxBatch` events (in one request or, split, in several).
        result.duplicateEvents = arrivals.ids.count - delivered.count
        result.duplicateRequests = arrivals.requestsWithDuplicates
        result.duplicateBound = interruptions * maxBatch
        if result.duplicateEvents > result.duplicateBound {
            problem("\(result.duplicateEvents) duplicate events in \(result.duplicateRequests) requests, beyond the bound of the batch in flight per interruption (\(interruptions) interruptions, batches of at most \(maxBatch))")
        }
        return result
    }
}

/// What a run found: its counts, the collector's answers, each source's accounting, and problems.
struct ChaosReport {
    var seed: UInt64
    var duration: Double
    var counts: [String: Int]
    var answers: [ChaosCollector.Answer: Int]
    var sources: [ChaosAccounting.Result] = []
    var problems: [String] = []

    var allProblems: [String] { problems + sources.flatMap(\.problems) }
    var knownOpenCount: Int { sources.map(\.knownOpen.count).reduce(0, +) }

    /// The one summary line.
    var summary: String {
        func n(_ key: String) -> Int { counts[key] ?? 0 }
        let answerText = ChaosCollector.Answer.allCases.map { "\($0.rawValue)=\(answers[$0] ?? 0)" }.joined(separator: " ")
        return "chaos seed=\(seed) duration=\(format(duration))s"
            + " sender: kills=\(n("kills")) stops=\(n("stops")) terms=\(n("terms")) restarts=\(n("restarts"))"
            + " tracker: kills=\(n("tracker_kills")) stops=\(n("tracker_stops")) terms=\(n("tracker_terms")) restarts=\(n("tracker_restarts"))"
            + " collector: restarts=\(n("collector_restarts")) outages=\(n("outages")) answers: \(answerText)"
            + " | " + sources.map(\.summary).joined(separator: " | ")
            + " | " + (allProblems.isEmpty ? "OK" : "FAILED (\(allProblems.count) problems)")
            + (knownOpenCount > 0 ? " with \(knownOpenCount) known open (tolerated)" : "")
    }
}
