/// The order rule of the README's Guarantees, checked exactly on the collector's record of every
/// request it was sent (its events and its answer), for one source.
///
/// With no failure the collector receives the log's order. After a request answered with a
/// retryable status (500, 503, 429: what starts isolating a batch; failures without an answer do
/// not), the sender proves the collector up with probes of later events while it isolates the
/// failed ones, so those events may arrive first after the probe events. So an event that
/// arrives first after a later one (an out-of-order first arrival) is explained when a request
/// holding it was answered so before every later event that arrived ahead of it arrived: those
/// were probes sent while it was isolated. Anything else fails the run.
///
/// To allow another kind of displacement (a window of requests in flight), add a case to
/// ``Explanation`` and a test for it in ``explain(_:arrivedAt:order:)``.
struct ChaosOrder {
    /// One request as the collector saw it.
    struct Request {
        var ids: [UInt64]
        var answer: ChaosCollector.Answer
    }

    /// Why an out-of-order first arrival is allowed.
    enum Explanation: String, CaseIterable {
        /// Later events went ahead as probes while this one was isolated after an answered failure.
        case isolationProbe = "isolation probes"
    }

    /// The answers that start isolating a batch.
    static let isolatingAnswers: Set<ChaosCollector.Answer> = [.internalError, .unavailable, .tooMany]

    /// Out-of-order first arrivals, by explanation, and those no rule explains (described).
    var explained: [Explanation: Int] = [:]
    var unexplained: [String] = []

    init(_ requests: [Request]) {
        // The index of the first request holding each id that was answered with an isolating failure
        // before the id arrived.
        var failedAt: [UInt64: Int] = [:]
        var arrived = Set<UInt64>()
        // First arrivals in order: (id, request index).
        var order: [(id: UInt64, request: Int)] = []
        var highest: UInt64?
        for (index, request) in requests.enumerated() {
            if Self.isolatingAnswers.contains(request.answer) {
                for id in request.ids where !arrived.contains(id) && failedAt[id] == nil { failedAt[id] = index }
            }
            guard request.answer == .ok else { continue }
            for id in request.ids where arrived.insert(id).inserted {
                if let highest, id < highest {
                    if let explanation = explain(id, failedAt: failedAt[id], order: order) {
                        explained[explanation, default: 0] += 1
                    } else {
                        let ahead = order.first { $0.id > id }!
                        unexplained.append("id \(id) arrived first (request #\(index)) after id \(ahead.id) (request #\(ahead.request)), \(failedAt[id].map { "though a request holding it failed only later, at #\($0)" } ?? "and no request holding it was answered 500, 503 or 429 before")")
                    }
                }
                order.append((id, index))
                highest = max(highest ?? id, id)
            }
        }
    }

    /// Why `id`, arriving now after later events, may do so; nil when no rule allows it.
    /// `failedAt` is the first request holding it answered with an isolating failure.
    func explain(_ id: UInt64, failedAt: Int?, order: [(id: UInt64, request: Int)]) -> Explanation? {
        // Every later event ahead of it arrived after the failure: the earliest of them is the
        // first in `order` with a higher id.
        if let failedAt, let first = order.first(where: { $0.id > id }), first.request > failedAt { return .isolationProbe }
        return nil
    }

    var outOfOrder: Int { explained.values.reduce(0, +) + unexplained.count }
}
