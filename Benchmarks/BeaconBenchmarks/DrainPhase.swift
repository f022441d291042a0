import BeaconLog
import Glibc

/// Phase B of the workload: drain 200k events in batches of 50, checking each batch against the
/// payloads and acknowledging it durably, against the raw in-place-checkpoint drain.
enum DrainPhase: BenchPhase {
    static let name = "B"
    static let usesPayloads = true
    static let summary = "drain: batches of 50 + durable acknowledgement (batch50), beacon and raw"

    static func runRound(_ context: BenchContext) throws -> [Figure] {
        let payloads = context.payloads(context.n("none"))
        // Alternate which runs first (see AppendPhase).
        if context.round % 2 == 0 {
            let raw = try raw(payloads, context)
            return [try beacon(payloads, context), raw]
        }
        return [try beacon(payloads, context), try raw(payloads, context)]
    }

    /// The starting state is what A none leaves (written untimed here, fsynced by close, page
    /// cache warm); the log is reopened before the timer.
    static func beacon(_ payloads: Payloads, _ context: BenchContext) throws -> Figure {
        var config = BeaconLog.Configuration(directory: try context.scratch("beacon-B"))
        config.maxBytes = 4 << 30
        config.durability = .none
        do {
            let log = try BeaconLog(configuration: config)
            for event in payloads.events { try log.append(event) }
            try log.close()
        }
        let log = try BeaconLog(configuration: config)
        let events = payloads.events
        let seconds = try time {
            var k = 0
            while k < events.count {
                let batch = try log.read(maxRecords: 50)
                guard batch.count == min(50, events.count - k) else {
                    throw BenchError("beacon drain: batch at \(k) holds \(batch.count) records")
                }
                for (j, record) in batch.records.enumerated() {
                    let same = record.withUnsafeBytes { got in
                        events[k + j].withUnsafeBytes { want in
                            got.count == want.count && memcmp(got.baseAddress!, want.baseAddress!, got.count) == 0
                        }
                    }
                    guard same else { throw BenchError("beacon drain: record \(k + j) differs from the payload") }
                }
                try log.acknowledge(through: batch.end)
                k += batch.count
            }
        }
        guard try log.read(maxRecords: 1).isEmpty else { throw BenchError("beacon drain: records left after the drain") }
        try log.close()
        return .throughput("beacon", "B", "batch50", n: events.count, bytes: payloads.totalBytes, seconds: seconds)
    }

    static func raw(_ payloads: Payloads, _ context: BenchContext) throws -> Figure {
        let dir = try context.scratch("raw-B")
        var file = try RawFile(path: dir + "/data")
        for event in payloads.events { try file.append(event) }
        try file.commit()
        file.close()
        let seconds = try RawDrain.run(dataPath: dir + "/data", checkpointPath: dir + "/checkpoint", payloads: payloads, batch: 50)
        return .throughput("raw", "B", "batch50", n: payloads.events.count, bytes: payloads.totalBytes, seconds: seconds)
    }
}
