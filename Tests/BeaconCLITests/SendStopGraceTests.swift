import Foundation
import Glibc
import Synchronization
import Testing
import BeaconTestTraits

/// Issue sigterm31: `beacon send --follow` stopped by SIGTERM just after its last batch was
/// answered left that batch pending (AppendWhileFollowTests, seed 3, once in three loaded runs):
/// the signal cancelled the request whose answer was on its way. A stop now writes no new
/// request and waits, up to `--grace`, for the answers to those already written, acknowledging
/// each 2xx: a clean stop leaves nothing the collector accepted pending, so nothing goes twice.
@Suite("beacon send: a signal waits for the answers to the requests in flight", .serialized, .blocking)
struct SendStopGraceTests {
    /// When the stop comes.
    enum Stop: String, CustomStringConvertible {
        /// SIGTERM while the collector holds the first answer; it answers once send said it stops.
        case whileHeld
        /// The collector sends SIGTERM, then at once writes the last answer.
        case justBeforeLastAnswer
        /// The collector writes the last answer, then at once sends SIGTERM.
        case justAfterLastAnswer

        var description: String { rawValue }
    }

    /// A collector that answers 200 to every request, either at once or only once ``release()``
    /// was called; the idempotency key of every request it read, in order. It sends SIGTERM to
    /// the process ``stop(_:after:)`` names just before or after writing the answer that call names.
    final class HeldCollector: Sendable {
        private final class State: Sendable {
            let value = Mutex((released: false, keys: [String](), stop: (pid: Int32(0), answer: 0)))
        }
        let server: ScriptedServer
        private let box = State()

        init(holding: Bool, signalFirst: Bool = false) throws {
            let box = self.box
            server = try ScriptedServer { connection, _ in
                while let (head, _) = connection.readRequest() {
                    let key = head.split(separator: "\r\n").first { $0.split(separator: ":").first?.lowercased().hasSuffix("idempotency-key") == true }.map { String($0.split(separator: ":")[1]).trimmingCharacters(in: .whitespaces) } ?? "?"
                    let (count, stop) = box.value.withLock { s in
                        s.keys.append(key)
                        return (s.keys.count, s.stop)
                    }
                    if holding { _ = eventually(within: 120) { box.value.withLock { $0.released } } }
                    let signals = stop.pid > 0 && count == stop.answer
                    if signals && signalFirst { kill(stop.pid, SIGTERM) }
                    connection.answer(200)
                    if signals && !signalFirst { kill(stop.pid, SIGTERM) }
                }
            }
        }

        var url: String { "http://127.0.0.1:\(server.port)/events" }
        var keys: [String] { box.value.withLock { $0.keys } }
        func release() { box.value.withLock { $0.released = true } }
        /// SIGTERM to `pid` right after the answer to the `answer`th request is written; false if
        /// that request was read already (then nobody sends it).
        func stop(_ pid: Int32, after answer: Int) -> Bool {
            box.value.withLock { s in
                s.stop = (pid, answer)
                return s.keys.count < answer
            }
        }
    }

    /// Every case: 12 events in batches of 4 (3 requests), `send --follow` stopped by SIGTERM while
    /// a request waits for its answer (the collector answers only after the sender said it is
    /// stopping), or sent by the collector just before or just after it writes the last answer
    /// (the answer on its way, in the socket, or being acknowledged: AppendWhileFollowTests' stop). Whatever the collector answered 2xx must be acknowledged when send exits (pending =
    /// 12 - 4 x requests it read: each request it read was answered), and the next send sends only
    /// the rest: no idempotency key twice. `--grace 60` keeps a loaded machine from turning a late
    /// answer into a pending batch (a collector that never answers, with the default grace of
    /// 1 s, is SendFollowTests').
    @Test("SIGTERM while requests wait for their answers: those answered 2xx are acknowledged before send exits and never sent again", arguments: [
        (Stop.whileHeld, 8), (.whileHeld, 1), (.justBeforeLastAnswer, 8), (.justBeforeLastAnswer, 1), (.justAfterLastAnswer, 8), (.justAfterLastAnswer, 1),
    ])
    func signalWaitsForAnswers(stop: Stop, window: Int) throws {
        let holding = stop == .whileHeld
        try withTemporaryDirectory { dir in
            #expect(try BeaconToolRunner.run(["append", dir], stdin: stdinData(events(12))).status == 0)
            let collector = try HeldCollector(holding: holding, signalFirst: stop == .justBeforeLastAnswer)
            defer {
                collector.release()
                collector.server.stop()
            }
            let sender = try RunningTool(["send", dir, "--url", collector.url, "--batch", "4", "--catch-up-batch", "4", "--window", String(window), "--follow", "--grace", "60"])
            defer { sender.kill() }
            // Armed after the request it waits for was read (a loaded machine), the stop is sent here.
            if !holding && !collector.stop(sender.pid, after: 3) { sender.post(SIGTERM) }
            if holding {
                #expect(eventually(within: 60) { collector.keys.count == 1 }, "the first request arrives")
                sender.post(SIGTERM)
                // The answer goes out once the signal is handled: send says it waits for it (or,
                // before the fix, it has already exited without it).
                #expect(eventually(within: 60) { sender.stderrSoFar.contains("waiting up to") || !sender.isRunning }, "\(sender.stderrSoFar)")
                collector.release()
            }
            let stopped = sender.wait()
            #expect(stopped.status == 0, "\(stopped.stderr)")
            #expect(stopped.stderr.contains("stopped by signal \(SIGTERM)"), "\(stopped.stderr)")
            let read = collector.keys.count
            #expect(read >= 1, "\(collector.keys)")
            #expect(try statusJSON(dir)["pending_records"] as? Int == 12 - 4 * read, "the collector accepted \(read) batches of 4: \(stopped.stderr)")
            print("send --window \(window) stopped by SIGTERM \(stop): the collector read and answered \(read) of 3 requests")

            collector.release()
            let again = try BeaconToolRunner.run(["send", dir, "--url", collector.url, "--batch", "4", "--catch-up-batch", "4"])
            #expect(again.status == 0, "\(again.stderr)")
            #expect(try statusJSON(dir)["pending_records"] as? Int == 0)
            let keys = collector.keys
            #expect(keys.count == 3 && Set(keys).count == 3, "each batch goes once: \(keys)")
        }
    }
}
