/// The accounting at the end of a run, both ways, for one source: every produced event was
/// delivered, or counted as dropped, or set aside with a true reason; nothing counted as lost or
/// set aside was delivered; first arrivals in log order; bytes unchanged; duplicates within the
/// documented bound.
enum ChaosAccounting {
    /// One line of `rejected.jsonl`.
    struct SetAside {
        var id: UInt64
        var status: Int?
        var reason: String
        /// `rejected_at`, milliseconds since 1970.
        var at: Int64 = 0
        var line: String
    }

    /// What `beacon append` said its quota dropped: its own count, before a sender settled it.
    struct ToolCount {
        var dropped = 0
    }

    struct Result {
        var source: ChaosSource
        var produced = 0
        var delivered = 0
        /// Delivered events that were not surely produced (a tracker's last block before a kill).
        var deliveredUnsure = 0
        /// The log's counters of lost events (quota and the like), from `beacon status --json`.
        var dropped = 0
        /// `dropped.quotaInDoubt`: deleted by the quota after they were sent without a recorded answer.
        var inDoubt = 0
        /// Of those, the ones the collector had accepted.
        var inDoubtDelivered = 0
        var setAside = 0
        var duplicateEvents = 0
        var duplicateRequests = 0
        var duplicateBound = 0
        /// First arrivals after a later event, and how many of them each order rule allowed.
        var outOfOrder = 0
        var explainedOutOfOrder: [ChaosOrder.Explanation: Int] = [:]
        var poisonProduced = 0
        var problems: [String] = []

        var summary: String {
            "\(source): produced=\(produced) delivered=\(delivered)\(deliveredUnsure > 0 ? "(+\(deliveredUnsure) of the unsure)" : "") dropped=\(dropped) in_doubt=\(inDoubt) (\(inDoubtDelivered) of them delivered) set_aside=\(setAside) (poison produced \(poisonProduced)) duplicates=\(duplicateEvents) in \(duplicateRequests) requests (bound \(duplicateBound)) out_of_order=\(outOfOrder)\(outOfOrder > 0 ? " (" + explainedOutOfOrder.sorted { $0.key.rawValue < $1.key.rawValue }.map { "\($0.value) after \($0.key.rawValue)" }.joined(separator: ", ") + ")" : "")"
        }
    }

    static func account(_ source: ChaosSource, events: ChaosEvents, produced ranges: [Range<UInt64>], maybe: [Range<UInt64>],
                        arrivals: ChaosCollector.Arrivals, status: [String: Any], rejected: [SetAside],
                        outages: [ClosedRange<Int64>] = [], toolDropped: ToolCount? = nil, inDoubt inDoubtRanges: [ClosedRange<UInt64>] = [],
                        interruptions: Int, maxBatch: Int, window: Int = ChaosRun.window) -> Result {
        var result = Result(source: source)
        func problem(_ text: String) { result.problems.append("\(source): \(text)") }
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
        // First arrivals in log order, but for what the Guarantees article's order rule allows (ChaosOrder).
        let order = ChaosOrder(arrivals.requests)
        result.outOfOrder = order.outOfOrder
        result.explainedOutOfOrder = order.explained
        if !order.unexplained.isEmpty {
            problem("\(order.unexplained.count) events arrived first out of log order, which no order rule allows: \(order.unexplained.prefix(3).joined(separator: "; "))")
        }
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
            // The collector's 400 it rests on: the last one for this event before the sender
            // wrote the entry. When that answer came is what must not fall in an outage (the
            // port closed), not when the sender wrote it down: a 400 answered 33 ms before the
            // port closed was written 11 ms after (seed 101, 240 s), which is no set-aside
            // during an outage.
            if let answered = arrivals.refusals[entry.id]?.filter({ $0 <= entry.at }).max() {
                if let outage = outages.first(where: { $0.contains(answered) }) {
                    problem("id \(entry.id) was set aside during an outage (the collector's port was closed from \(outage.lowerBound) to \(outage.upperBound == Int64.max ? "the end" : String(outage.upperBound)) ms; its 400 at \(answered)): \(entry.line)")
                }
            } else if events.isPoison(entry.id, source) && entry.status == 400 {
                problem("id \(entry.id) was set aside with a 400 the collector never gave it before \(entry.at) ms: \(entry.line)")
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

        // In doubt: the quota deleted them after a sender had sent them without recording the
        // answer; the sender named each (its diagnostic's seqs, which are the ids here). Each is
        // counted once, was produced, and may or may not have arrived.
        let droppedByReason = (status["dropped"] as? [String: Any] ?? [:]).compactMapValues { $0 as? Int }
        var inDoubt = Set<UInt64>()
        var namedInDoubt = 0
        for range in inDoubtRanges {
            namedInDoubt += range.count
            for id in range where !inDoubt.insert(id).inserted { problem("id \(id) was named in doubt twice") }
        }
        result.inDoubt = droppedByReason["quotaInDoubt"] ?? 0
        result.inDoubtDelivered = inDoubt.intersection(delivered).count
        if result.inDoubt != namedInDoubt {
            problem("the log counts \(result.inDoubt) events as in doubt (quotaInDoubt), the sender named \(namedInDoubt) (\(inDoubtRanges.count) ranges)")
        }
        let inDoubtNotProduced = inDoubt.subtracting(produced).subtracting(unsure)
        if !inDoubtNotProduced.isEmpty { problem("\(inDoubtNotProduced.count) events counted in doubt were never produced: ids \(list(inDoubtNotProduced))") }
        let inDoubtSetAside = inDoubt.intersection(setAside)
        if !inDoubtSetAside.isEmpty { problem("\(inDoubtSetAside.count) events counted in doubt were also set aside: ids \(list(inDoubtSetAside))") }

        // Dropped (never sent): the log's loss counters against exactly what neither arrived, nor
        // was set aside, nor is in doubt. produced = delivered ∪ dropped ∪ in doubt ∪ set aside.
        let notDropped: Set<String> = ["rejected", "expired", "quotaInDoubt"]
        result.dropped = droppedByReason.filter { !notDropped.contains($0.key) }.values.reduce(0, +)
        let missing = produced.subtracting(delivered).subtracting(setAside)
        let missingNotInDoubt = missing.subtracting(inDoubt)
        if missingNotInDoubt.count > result.dropped {
            problem("\(missingNotInDoubt.count - result.dropped) events lost without being counted: \(missing.count) produced events were neither delivered nor set aside (\(missing.count - missingNotInDoubt.count) of them in doubt), and the log counts \(result.dropped) as dropped \(droppedByReason); missing ids \(list(missingNotInDoubt))")
        } else if missingNotInDoubt.count < result.dropped {
            problem("the log counts \(result.dropped) events as dropped (never sent) \(droppedByReason), but only \(missingNotInDoubt.count) produced events were neither delivered, nor set aside, nor in doubt: \(result.dropped - missingNotInDoubt.count) counted as dropped were delivered")
        }
        // `beacon append` reports the quota's own count, before a sender settles it: every
        // record it deleted unacknowledged, so at least the dropped and at most the dropped,
        // the in doubt and those delivered after all.
        if let toolDropped, toolDropped.dropped < missingNotInDoubt.count {
            problem("beacon append said it dropped \(toolDropped.dropped) records, but \(missingNotInDoubt.count) produced events were neither delivered, nor set aside, nor in doubt")
        }
        if let counted = droppedByReason["rejected"], counted != setAside.count {
            problem("the log counts \(counted) events as rejected, rejected.jsonl holds \(setAside.count)")
        }
        if let corrupt = status["corrupt_skipped"] as? Int, corrupt > 0 {
            problem("the log passed over \(corrupt) records as corrupt (\(status["corrupt_skipped_by_reason"] ?? "")): no record here was damaged")
        }
        if let pending = status["pending_records"] as? Int, pending > 0 { problem("\(pending) records still pending after the drain") }

        // Duplicates: each interruption (a kill, a stop, a term, the collector going down) may
        // re-send the batches in flight, at most `window` requests of at most `maxBatch` events
        // each (in one request or, split, in several).
        result.duplicateEvents = arrivals.ids.count - delivered.count
        result.duplicateRequests = arrivals.requestsWithDuplicates
        result.duplicateBound = interruptions * maxBatch * window
        if result.duplicateEvents > result.duplicateBound {
            problem("\(result.duplicateEvents) duplicate events in \(result.duplicateRequests) requests, beyond the bound of the window in flight per interruption (\(interruptions) interruptions, batches of at most \(maxBatch), at most \(window) in flight)")
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
    }
}
