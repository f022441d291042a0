import BeaconLog

/// Phase A of the workload: append N events, one call per event, in three durability modes, each
/// against the raw baseline in the same round. Also reports the peak RSS of the append phases
/// (`rss_mib`, first round) and how much it grew while appending (`rss_growth_mib`).
enum AppendPhase: BenchPhase {
    static let name = "A"
    static let usesPayloads = true
    static let summary = "append: modes none (N=200k), group100 (200k), each (5k), beacon and raw"

    static func runRound(_ context: BenchContext) throws -> [Figure] {
        var figures: [Figure] = []
        var peak = 0.0
        var growth = 0.0
        for mode in ["none", "group100", "each"] where context.appendModes.isEmpty || context.appendModes.contains(mode) {
            let payloads = context.payloads(context.n(mode))
            // Alternate which runs first, so that the disk's state after the other one (writeback,
            // journal) does not always favour the same side of the ratio.
            if context.round % 2 == 0 { figures.append(try raw(mode, payloads, context)) }
            let before = Memory.currentMiB
            Memory.resetPeak()
            figures.append(try beacon(mode, payloads, context))
            peak = max(peak, Memory.peakMiB)
            growth = max(growth, Memory.peakMiB - before)
            if context.round % 2 == 1 { figures.append(try raw(mode, payloads, context)) }
        }
        // Peak RSS while appending. Only the first round's absolute figure is clean: later rounds
        // run after other phases, whose freed heap the process keeps. The growth during the
        // append phases (peak minus RSS at their start, payloads already in memory) is per round.
        if context.round == 1 { figures.append(.value("beacon", "A", "rss_mib", peak)) }
        figures.append(.value("beacon", "A", "rss_growth_mib", growth))
        return figures
    }

    /// Beacon: a fresh log opened before the timer; the timer stops after the last durability point.
    static func beacon(_ mode: String, _ payloads: Payloads, _ context: BenchContext) throws -> Figure {
        var config = BeaconLog.Configuration(directory: try context.scratch("beacon-A-\(mode)"))
        config.maxBytes = 4 << 30
        switch mode {
        case "none": config.durability = .none
        // Group commit exactly per 100 appends (the interval never fires first within a run).
        case "group100": config.durability = .batched(records: 100, interval: .seconds(3600))
        default: config.durability = .everyRecord
        }
        let log = try BeaconLog(configuration: config)
        let events = payloads.events
        let seconds = try time {
            for event in events { try log.append(event) }
            if mode == "none" { try log.sync() }  // the one final fsync, inside the timed region
        }
        try log.close()
        return .throughput("beacon", "A", mode, n: events.count, bytes: payloads.totalBytes, seconds: seconds)
    }

    /// Raw: a 64 KiB buffer, one `write(2)` per full buffer or durability point, `fdatasync`.
    static func raw(_ mode: String, _ payloads: Payloads, _ context: BenchContext) throws -> Figure {
        var file = try RawFile(path: try context.scratch("raw-A-\(mode)") + "/data")
        defer { file.close() }
        let events = payloads.events
        let seconds = try time {
            switch mode {
            case "none":
                for event in events { try file.append(event) }
                try file.commit()
            case "group100":
                for (i, event) in events.enumerated() {
                    try file.append(event)
                    if i % 100 == 99 { try file.commit() }
                }
            default:
                for event in events {
                    try file.append(event)
                    try file.commit()
                }
            }
        }
        return .throughput("raw", "A", mode, n: events.count, bytes: payloads.totalBytes, seconds: seconds)
    }
}
