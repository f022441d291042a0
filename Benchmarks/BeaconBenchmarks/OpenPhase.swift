import BeaconLog

/// Opening a log with a large backlog: ≥ 1 GiB pending (64 MiB under `--quick`). Opening must
/// cost O(newest segment), not O(backlog): a large backlog must not slow a restart.
enum OpenPhase: BenchPhase {
    static let name = "open"
    static let usesPayloads = true
    static let summary = "time to open a log holding >= 1 GiB pending (open_ms)"

    static func runRound(_ context: BenchContext) throws -> [Figure] {
        var config = BeaconLog.Configuration(directory: context.directory + "/beacon-open")
        config.maxBytes = 8 << 30
        config.durability = .none
        // The backlog is written once per run (in the first round) and reopened in every round.
        if context.prepared["open"] == nil {
            config.directory = try context.scratch("beacon-open")
            let target: UInt64 = context.quick ? 64 << 20 : 1 << 30
            let events = context.payloads(context.n("none")).events
            let log = try BeaconLog(configuration: config)
            var i = 0
            while log.stats.pendingBytes < target {
                for _ in 0..<10_000 {
                    try log.append(events[i % events.count])
                    i += 1
                }
            }
            try log.close()
            context.prepared["open"] = config.directory
        }
        // Median of 5 opens (open + close; close has nothing to sync).
        var samples: [Double] = []
        var pending: UInt64 = 0
        for _ in 0..<5 {
            var log: BeaconLog?
            let seconds = try time { log = try BeaconLog(configuration: config) }
            pending = log!.stats.pendingBytes
            try log!.close()
            samples.append(seconds * 1000)
        }
        return [.value("beacon", "open", "open_ms", median(samples), fields: [("pending_mib", format(Double(pending) / 1048576, 0))])]
    }
}
