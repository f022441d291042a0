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
        let rejectedPoison = ChaosAccounting.SetAside(id: poison, status: 400, reason: "HTTP 400: poison", line: "poison")
        func arrivals(_ ids: [UInt64], mismatches: Int = 0) -> ChaosCollector.Arrivals {
            var arrivals = ChaosCollector.Arrivals()
            for id in ids {
                arrivals.ids.append(id)
                arrivals.seen.insert(id)
            }
            arrivals.byteMismatches = mismatches
            return arrivals
        }
        func account(delivered: [UInt64], dropped: Int = 0, rejected: [ChaosAccounting.SetAside] = [rejectedPoison],
                     corrupt: Int = 0, mismatches: Int = 0, interruptions: Int = 1, maxBatch: Int = 10,
                     duplicateRequests: Int = 0, outages: [ClosedRange<Int64>] = [], toolDropped: ChaosAccounting.ToolCount? = nil) -> [String] {
            var collected = arrivals(delivered, mismatches: mismatches)
            collected.requestsWithDuplicates = duplicateRequests
            let status: [String: Any] = ["dropped": ["quotaDeleted": dropped], "corrupt_skipped": corrupt, "pending_records": 0]
            return ChaosAccounting.account(.sidecar, events: events, produced: [0..<count], maybe: [], arrivals: collected, status: status,
                                           rejected: rejected, outages: outages, toolDropped: toolDropped, interruptions: interruptions, maxBatch: maxBatch).problems
        }
        let good = all.filter { $0 != poison }
        var failures: [String] = []
        func expect(_ name: String, _ problems: [String], _ phrase: String?) {
            if let phrase {
                if !problems.contains(where: { $0.contains(phrase) }) { failures.append("\(name): expected a problem saying '\(phrase)', got \(problems)") }
            } else if !problems.isEmpty {
                failures.append("\(name): expected no problem, got \(problems)")
            }
        }
        expect("clean", account(delivered: good), nil)
        expect("clean with a quota drop", account(delivered: Array(good.dropFirst(20)), dropped: 20), nil)
        expect("clean with a re-sent batch", account(delivered: good + good.suffix(10), duplicateRequests: 1), nil)
        expect("clean, the tool's count right", account(delivered: Array(good.dropFirst(20)), dropped: 20, toolDropped: .init(dropped: 20, saysNeverDelivered: true)), nil)
        expect("clean, the tool's count an upper bound", account(delivered: Array(good.dropFirst(20)), dropped: 20, toolDropped: .init(dropped: 25)), nil)
        expect("the tool's count wrong", account(delivered: Array(good.dropFirst(20)), dropped: 20, toolDropped: .init(dropped: 25, saysNeverDelivered: true)), "beacon append said")
        expect("the tool's count short", account(delivered: Array(good.dropFirst(20)), dropped: 20, toolDropped: .init(dropped: 19)), "beacon append said")
        expect("lost", account(delivered: Array(good.dropLast())), "lost without being counted")
        expect("over-counted", account(delivered: good, dropped: 3), "counted as dropped were delivered")
        expect("out of order", account(delivered: [good[1], good[0]] + good.dropFirst(2)), "out of log order")
        expect("phantom", account(delivered: good + [count + 5]), "never produced")
        expect("bytes", account(delivered: good, mismatches: 1), "differ from the bytes produced")
        expect("set aside, not poison", account(delivered: Array(good.dropFirst()), rejected: [rejectedPoison, .init(id: good[0], status: 503, reason: "failed 3 times", line: "x")]), "not a poison event")
        expect("set aside, untrue status", account(delivered: good, rejected: [.init(id: poison, status: 500, reason: "failed 3 times", line: "x")]), "not the collector's 400")
        expect("set aside and delivered", account(delivered: all), "also delivered")
        expect("set aside twice", account(delivered: good, rejected: [rejectedPoison, rejectedPoison]), "set aside twice")
        expect("poison neither set aside nor dropped", account(delivered: good, rejected: []), "lost without being counted")
        expect("set aside during an outage", account(delivered: good, rejected: [.init(id: poison, status: 400, reason: "HTTP 400", at: 1500, line: "x")], outages: [1000...2000]), "during an outage")
        expect("passed over", account(delivered: good, corrupt: 1), "passed over")
        expect("duplicates beyond the bound", account(delivered: good + good.suffix(30), duplicateRequests: 1), "beyond the bound")
        if failures.isEmpty {
            print("beacon-chaos self-test: the accounting passes the clean outcomes and catches each of 15 broken ones")
            exit(0)
        }
        for failure in failures { print("beacon-chaos self-test FAILED: \(failure)") }
        exit(1)
    }
}
