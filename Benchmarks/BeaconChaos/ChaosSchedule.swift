import BeaconTestSupport
import Foundation

/// What the harness does to whom, and when: drawn from the seed alone, before the run starts,
/// so that a seed names one schedule (the processes' timing around it is the machine's).
struct ChaosSchedule {
    enum Target: String { case sender, tracker, collector }

    enum Action: Equatable {
        /// SIGKILL, then a restart after `pause` seconds.
        case kill
        /// SIGSTOP, then SIGCONT after `pause` seconds.
        case stop
        /// SIGTERM, a wait for the process to end by itself, then a restart after `pause` seconds.
        case term
        /// The collector closes its port and every connection for `pause` seconds.
        case restart
        /// The collector stays down until the producer has written `ChaosOptions.outageBytes`
        /// (enough to overflow the quota), at most 90 s.
        case outage
    }

    struct Step {
        var at: Double
        var target: Target
        var action: Action
        var pause: Double
    }

    let steps: [Step]
    /// The sender's batch size for each start (`--batch`), and its catch-up batch (0: none).
    let senderBatches: [(batch: Int, catchUp: Int)]
    /// The producer's `--sync` mode for each of its runs.
    let syncModes: [String]

    init(seed: UInt64, duration: Double) {
        var generator = SplitMix(seed: seed)
        func uniform(_ range: ClosedRange<Double>) -> Double { Double.random(in: range, using: &generator) }
        /// Exponential gaps with the given mean, at least 0.2 s.
        func gap(_ mean: Double) -> Double { max(0.2, -mean * log(1 - uniform(0...0.999))) }
        var steps: [Step] = []
        // The sender and the tracker: a kill, a stop or a term every 4 s and 5 s on average.
        for (target, first, mean) in [(Target.sender, 1.0, 4.0), (.tracker, 2.0, 5.0)] {
            var t = first
            while true {
                t += gap(mean)
                guard t < duration else { break }
                let roll = uniform(0...1)
                let action: Action = roll < 0.4 ? .kill : roll < 0.65 ? .stop : .term
                steps.append(Step(at: t, target: target, action: action, pause: action == .stop ? uniform(0.1...3) : uniform(0...0.5)))
            }
        }
        var t = 0.0
        while true {
            t += gap(10)
            guard t < duration else { break }
            steps.append(Step(at: t, target: .collector, action: .restart, pause: uniform(0.1...2)))
        }
        // One outage long enough to overflow the quota at 25 s (at a third of a shorter run), then every 75 s.
        var outage = min(25, duration / 3)
        while outage < duration - 5 {
            steps.append(Step(at: outage, target: .collector, action: .outage, pause: 0))
            outage += 75
        }
        self.steps = steps.sorted { $0.at < $1.at }
        senderBatches = (0..<10_000).map { _ in
            let batch = [10, 50, 50, 200, 500][Int(generator.next() % 5)]
            return (batch, generator.next() % 3 == 0 ? 500 : 0)
        }
        syncModes = (0..<1000).map { _ in ["batch", "batch", "none", "each"][Int(generator.next() % 4)] }
    }
}
