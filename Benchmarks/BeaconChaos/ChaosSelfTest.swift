import Foundation

/// `beacon-chaos --self-test`: the accounting against made-up outcomes, one per way a run can go
/// wrong, so that a check that cannot fail is found here rather than trusted. Exit 0 when a clean
/// outcome passes and each broken one fails with its own problem.
enum ChaosSelfTest {
    static func run() -> Never {
        let events = ChaosEvents(seed: 7)
        let poison = (0..<UInt64(1_000_000)).first { events.isPoison($0, .sidecar) }!
        let count = poison + 50
        let all = Array(0..<count)
        let rejectedPoison = ChaosAccounting.SetAside(id: poison, status: 400, reason: "HTTP 400: poison", at: 1011, line: "poison")
        /// `ids` accepted one request each, after the `failed` requests (refused as said).
        /// The poison event refused at `refusedAt` (milliseconds since 1970).
        func arrivals(_ ids: [UInt64], failed: [ChaosOrder.Request] = [], mismatches: Int = 0, refusedAt: [Int64] = [990]) -> ChaosCollector.Arrivals {
            var arrivals = ChaosCollector.Arrivals()
            arrivals.requests = failed
            arrivals.refusals[poison] = refusedAt
            for id in ids {
                arrivals.ids.append(id)
                arrivals.seen.insert(id)
                arrivals.requests.append(.init(ids: [id], answer: .ok))
            }
            arrivals.byteMismatches = mismatches
            return arrivals
        }
        func account(delivered: [UInt64], dropped: Int = 0, rejected: [ChaosAccounting.SetAside] = [rejectedPoison],
                     corrupt: Int = 0, mismatches: Int = 0, interruptions: Int = 1, maxBatch: Int = 10,
                     duplicateRequests: Int = 0, outages: [ClosedRange<Int64>] = [], toolDropped: ChaosAccounting.ToolCount? = nil,
                     inDoubt: Int = 0, named: [ClosedRange<UInt64>] = [], failed: [ChaosOrder.Request] = [], refusedAt: [Int64] = [990]) -> [String] {
            var collected = arrivals(delivered, failed: failed, mismatches: mismatches, refusedAt: refusedAt)
            collected.requestsWithDuplicates = duplicateRequests
            let status: [String: Any] = ["dropped": ["quotaDeleted": dropped, "quotaInDoubt": inDoubt], "corrupt_skipped": corrupt, "pending_records": 0]
            return ChaosAccounting.account(.sidecar, events: events, produced: [0..<count], maybe: [], arrivals: collected, status: status,
                                           rejected: rejected, outages: outages, toolDropped: toolDropped, inDoubt: named, interruptions: interruptions, maxBatch: maxBatch).problems
        }
        let good = all.filter { $0 != poison }
        var failures: [String] = []
        var brokenCount = 0
        func expect(_ name: String, _ problems: [String], _ phrase: String?) {
            if phrase != nil { brokenCount += 1 }
            if let phrase {
                if !problems.contains(where: { $0.contains(phrase) }) { failures.append("\(name): expected a problem saying '\(phrase)', got \(problems)") }
            } else if !problems.isEmpty {
                failures.append("\(name): expected no problem, got \(problems)")
            }
        }
        expect("clean", account(delivered: good), nil)
        expect("clean with a quota drop", account(delivered: Array(good.dropFirst(20)), dropped: 20), nil)
        expect("clean with a re-sent batch", account(delivered: good + good.suffix(10), duplicateRequests: 1), nil)
        expect("clean, the tool's count right", account(delivered: Array(good.dropFirst(20)), dropped: 20, toolDropped: .init(dropped: 20)), nil)
        expect("clean, the tool's count an upper bound", account(delivered: Array(good.dropFirst(20)), dropped: 20, toolDropped: .init(dropped: 25)), nil)
        // The quota deleted ids 0..<20; the sender had sent 5...9 without recording the answer,
        // and the collector had accepted 7 and 8 of them.
        let inDoubtCase = [good[7], good[8]] + good.dropFirst(20)
        expect("clean with events in doubt", account(delivered: inDoubtCase, dropped: 15, inDoubt: 5, named: [5...9]), nil)
        expect("in doubt counted as dropped", account(delivered: inDoubtCase, dropped: 18, named: [5...9]), "the sender named")
        expect("in doubt counted, not named", account(delivered: inDoubtCase, dropped: 15, inDoubt: 5), "the sender named")
        expect("in doubt named twice", account(delivered: inDoubtCase, dropped: 15, inDoubt: 6, named: [5...9, 9...9]), "named in doubt twice")
        expect("dropped counts an in-doubt one", account(delivered: inDoubtCase, dropped: 16, inDoubt: 5, named: [5...9]), "counted as dropped were delivered")
        expect("the tool's count short", account(delivered: Array(good.dropFirst(20)), dropped: 20, toolDropped: .init(dropped: 19)), "beacon append said")
        expect("lost", account(delivered: Array(good.dropLast())), "lost without being counted")
        expect("over-counted", account(delivered: good, dropped: 3), "counted as dropped were delivered")
        let swapped = [good[1], good[0]] + good.dropFirst(2)
        expect("out of order", account(delivered: swapped), "out of log order")
        // The front refused 503 (isolation starts), the next event accepted as a probe, then the front.
        expect("clean, out of order after isolation probes", account(delivered: swapped, failed: [.init(ids: [good[0], good[1]], answer: .unavailable)]), nil)
        expect("out of order after an unanswered failure", account(delivered: swapped, failed: [.init(ids: [good[0], good[1]], answer: .cut)]), "out of log order")
        // A 400 for the front with a window in flight: the next request, already written, accepted first.
        expect("clean, out of order behind an answered failure in the window", account(delivered: swapped, failed: [.init(ids: [good[0]], answer: .badRequest)]), nil)
        let beyondWindow = Array(good[1...ChaosRun.window]) + [good[0]] + Array(good.dropFirst(ChaosRun.window + 1))
        expect("out of order beyond the window", account(delivered: beyondWindow, failed: [.init(ids: [good[0]], answer: .badRequest)]), "out of log order")
        expect("out of order after a failure of later events only", account(delivered: swapped, failed: [.init(ids: [good[1]], answer: .unavailable)]), "out of log order")
        expect("phantom", account(delivered: good + [count + 5]), "never produced")
        expect("bytes", account(delivered: good, mismatches: 1), "differ from the bytes produced")
        expect("set aside, not poison", account(delivered: Array(good.dropFirst()), rejected: [rejectedPoison, .init(id: good[0], status: 503, reason: "failed 3 times", line: "x")]), "not a poison event")
        expect("set aside, untrue status", account(delivered: good, rejected: [.init(id: poison, status: 500, reason: "failed 3 times", line: "x")]), "not the collector's 400")
        expect("set aside and delivered", account(delivered: all), "also delivered")
        expect("set aside twice", account(delivered: good, rejected: [rejectedPoison, rejectedPoison]), "set aside twice")
        expect("poison neither set aside nor dropped", account(delivered: good, rejected: []), "lost without being counted")
        expect("set aside during an outage", account(delivered: good, rejected: [.init(id: poison, status: 400, reason: "HTTP 400", at: 1500, line: "x")], outages: [1000...2000], refusedAt: [990, 1400]), "during an outage")
        // Answered 10 ms before the port closed, written down by the sender 11 ms after.
        expect("clean, refused just before an outage", account(delivered: good, outages: [1000...2000]), nil)
        expect("set aside without the collector's 400", account(delivered: good, refusedAt: []), "never gave it")
        expect("set aside before the collector's 400", account(delivered: good, refusedAt: [1200]), "never gave it")
        expect("passed over", account(delivered: good, corrupt: 1), "passed over")
        // One interruption may send again the window in flight: W batches of at most 10.
        expect("duplicates within the window", account(delivered: good + good.suffix(10 * ChaosRun.window), duplicateRequests: ChaosRun.window), nil)
        expect("duplicates beyond the bound", account(delivered: good + good.suffix(10 * ChaosRun.window + 1), duplicateRequests: 1), "beyond the bound")
        if failures.isEmpty {
            print("beacon-chaos self-test: the accounting passes the clean outcomes and catches each of \(brokenCount) broken ones")
            exit(0)
        }
        for failure in failures { print("beacon-chaos self-test FAILED: \(failure)") }
        exit(1)
    }
}
