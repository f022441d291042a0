/// The order rule of the Guarantees article (Delivery order), checked exactly on the collector's record of every
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
/// With a window of requests in flight (pipelined on one connection), an answered failure ends
/// the window, but the requests already written behind the failed one are answered, and those
/// accepted are not sent again: the failed request's events may arrive after those of at most
/// `window` − 1 requests sent behind it. That is explained when a request holding the event was
/// answered with a failure (any status but 200; a request cut, reset or left hanging is not
/// answered, and the collector reads nothing behind it on that connection) before every later
/// event ahead of it arrived, and those arrived in at most `window` − 1 requests.
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
        /// Later events of at most W − 1 requests pipelined behind an answered failure went first.
        case window = "the window in flight"
    }

    /// The answers that end a window with requests behind them answered: every status but 200.
    static let windowEndingAnswers: Set<ChaosCollector.Answer> = [.badRequest, .tooLarge, .tooMany, .internalError, .unavailable]

    /// The most requests in flight (the senders' `--window`, `maxRequestsInFlight`).
    let window: Int

    /// The answers that start isolating a batch.
    static let isolatingAnswers: Set<ChaosCollector.Answer> = [.internalError, .unavailable, .tooMany]

    /// Out-of-order first arrivals, by explanation, and those no rule explains (described).
    var explained: [Explanation: Int] = [:]
    var unexplained: [String] = []

    init(_ requests: [Request], window: Int = ChaosRun.window) {
        self.window = window
        // The index of the first request holding each id answered with any failure before it arrived.
        var answeredFailureAt: [UInt64: Int] = [:]
        // The index of the first request holding each id that was answered with an isolating failure
        // before the id arrived.
        var failedAt: [UInt64: Int] = [:]
        var arrived = Set<UInt64>()
        // First arrivals in order: (id, request index).
        var order: [(id: UInt64, request: Int)] = []
        var highest: UInt64?
        // The highest id among the first `k + 1` first arrivals, for each k.
        var prefixMax: [UInt64] = []
        for (index, request) in requests.enumerated() {
            if Self.isolatingAnswers.contains(request.answer) {
                for id in request.ids where !arrived.contains(id) && failedAt[id] == nil { failedAt[id] = index }
            }
            if Self.windowEndingAnswers.contains(request.answer) {
                for id in request.ids where !arrived.contains(id) && answeredFailureAt[id] == nil { answeredFailureAt[id] = index }
            }
            guard request.answer == .ok else { continue }
            for id in request.ids where arrived.insert(id).inserted {
                if let highest, id < highest {
                    if let explanation = explain(id, failedAt: failedAt[id], answeredFailureAt: answeredFailureAt[id], order: order, prefixMax: prefixMax) {
                        explained[explanation, default: 0] += 1
                    } else {
                        let ahead = order.first { $0.id > id }!
                        unexplained.append("id \(id) arrived first (request #\(index)) after id \(ahead.id) (request #\(ahead.request)), \(failedAt[id].map { "though a request holding it failed only later, at #\($0)" } ?? "and no request holding it was answered 500, 503 or 429 before")")
                    }
                }
                order.append((id, index))
                prefixMax.append(max(prefixMax.last ?? id, id))
                highest = max(highest ?? id, id)
            }
        }
    }

    /// Why `id`, arriving now after later events, may do so; nil when no rule allows it.
    /// `failedAt` is the first request holding it answered with an isolating failure.
    /// `answeredFailureAt` is the first request holding it answered with any failure.
    func explain(_ id: UInt64, failedAt: Int?, answeredFailureAt: Int?, order: [(id: UInt64, request: Int)], prefixMax: [UInt64]) -> Explanation? {
        // Every later event ahead of it arrived after the failure: the earliest of them is the
        // first in `order` with a higher id.
        if let failedAt, let first = order.first(where: { $0.id > id }), first.request > failedAt { return .isolationProbe }
        // Every later event ahead of it arrived after an answered failure, in at most W - 1 requests
        // (arrivals are in request order: those after the failure are the tail of `order`).
        if let failure = answeredFailureAt {
            // The arrivals before the failure: none later than `id` (a running maximum).
            var low = 0, high = order.count
            while low < high {
                let mid = (low + high) / 2
                if order[mid].request <= failure { low = mid + 1 } else { high = mid }
            }
            if low > 0 && prefixMax[low - 1] > id { return nil }
            var requestsAhead = Set<Int>()
            for arrival in order[low...] where arrival.id > id {
                requestsAhead.insert(arrival.request)
                if requestsAhead.count > window - 1 { return nil }
            }
            return .window
        }
        return nil
    }

    var outOfOrder: Int { explained.values.reduce(0, +) + unexplained.count }
}
