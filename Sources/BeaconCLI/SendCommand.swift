import Beacon
import BeaconHTTP
import Dispatch
import Foundation
import Glibc
import Synchronization
import BeaconURLSession

/// `beacon send`: uploads a directory's pending events with the library's uploader (the sidecar
/// pattern: the service writes, `beacon send` ships).
struct SendCommand: Command {
    static let name = "send"
    static let summary = "Upload a directory's pending events to a collector (sidecar)"
    static let usage = """
        beacon send DIR --url URL [--batch N] [--catch-up-batch N] [--window N] [--format array|envelope|ndjson]
                        [--gzip] [--header 'K: V']... [--follow] [--grace S] [--retries N]
                        [--transport auto|urlsession|socket]
                        [--cacert FILE|DIR] [--cert FILE --key FILE] [--metrics HOST:PORT]
          Uploads DIR's pending events to URL in order with Beacon's uploader, holding DIR's
          reader lock (a service may keep appending), and acknowledges each batch when the
          collector answers 2xx. Answers are handled as the library does: 5xx, 408, 429 and
          network errors are retried with backoff (honouring Retry-After), 413 splits, 400/422
          set the refused events aside in DIR/rejected.jsonl, and an event that keeps failing
          while the rest goes through (after 3 failed attempts at its batch) is set aside there
          too, with the collector's answer. Header values are never printed.
          --url URL       the collector endpoint (http or https)
          --batch N       events per request (default 50)
          --catch-up-batch N
                          events per request while more than one batch is pending (a backlog),
                          still at most 1 MiB a request; default: as many as 1 MiB holds
                          (--catch-up-batch with the --batch size always sends --batch)
          --window N      the most requests in flight (default 8): pipelined on the one
                          connection (HTTP/1.1) while batches go through, the window adapted to
                          the collector's latency and back pressure; 1 for one at a time. A
                          collector that does not take pipelined requests gets one at a time
          --format F      array (default), envelope ({"sent_at":ms,"batch":[...]}) or ndjson
          --gzip          compress bodies (Content-Encoding: gzip)
          --header 'K: V' an extra header, e.g. 'Authorization: Bearer ...' (repeatable)
          --follow        keep running and send new events as soon as they are appended
                          (inotify), until SIGINT or SIGTERM; failures are retried for ever
          --grace S       on SIGINT or SIGTERM no new request goes out, and send waits up to
                          S seconds (default 1; 0 waits for none) for the answers to the
                          requests already sent, acknowledging each 2xx, so that a clean stop
                          sends nothing twice at the next start; a request still unanswered then
                          is cancelled and its events stay pending (sent next time, same key)
          --retries N     without --follow: transient failures in a row without progress (no
                          event delivered in between) before giving up (default 5; at least 3
                          for an event that keeps failing to be isolated and set aside)
          --transport T   auto or socket (default: Beacon's own HTTP/1.1 client, TLS through
                          the system's OpenSSL: less CPU a request, flat memory; honours
                          http_proxy, https_proxy, all_proxy and no_proxy as curl does, http
                          proxies only) or urlsession (URLSession, also for SOCKS proxies)
          --cacert PATH   https: trust the CA certificates in this PEM file (or directory named
                          by subject hash) instead of the system's; the certificate is always
                          verified (chain, validity, host name), TLS 1.2 or later
          --cert FILE, --key FILE
                          https: the client certificate (PEM) and its unencrypted key, for a
                          collector that asks for one (mutual TLS)
          --metrics HOST:PORT
                          serve GET /metrics there while sending (e.g. 127.0.0.1:9464): Prometheus'
                          text format, or OpenMetrics when the scraper asks for it; pending
                          records and bytes, the oldest pending event's age, events, requests and
                          bytes sent, answers by class, retries, set aside, dropped, corrupt
                          records passed over, the last success, request durations, the window
                          in flight (names beacon_..., see the Operating article)
          Exit: 0 drained (or stopped by a signal with --follow), 64 usage, 74 events could not
          be delivered (collector down or refusing the configuration: 401, 403, 404, a
          certificate that fails verification...; they stay pending; the message quotes the
          collector's answer or names the failed check), 75 DIR has another reader.
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let args = try ParsedArguments(arguments, options: ["--metrics", "--url", "--batch", "--catch-up-batch", "--window", "--format", "--header", "--retries", "--grace", "--transport", "--cacert", "--cert", "--key"], flags: ["--gzip", "--follow"], positionals: 1...1)
        guard let urlText = args.value("--url") else { throw CLIError(.usage, "--url is required") }
        guard let url = URL(string: urlText), let scheme = url.scheme?.lowercased(), scheme == "http" || scheme == "https", url.host != nil else {
            throw CLIError(.usage, "--url must be an http or https URL, not '\(RedactedURL(text: urlText))'")
        }
        let transport: any Transport
        let tls = try tlsConfiguration(args)
        switch try args.choice("--transport", ["auto", "urlsession", "socket"], default: "auto") {
        case "urlsession":
            guard tls == nil else { throw CLIError(.usage, "--cacert, --cert and --key need --transport socket or auto") }
            transport = HTTPTransport()
        case "socket":
            transport = try socketTransport(tls)
        default:
            transport = tls == nil ? Uploader.defaultTransport(for: url) : try socketTransport(tls)
        }
        // Its connection (a TLS goodbye, SSL_free) is closed on this thread before run returns,
        // not by a deinitializer on whichever thread lets go of it last, maybe during exit.
        defer { (transport as? SocketTransport)?.close() }
        var config = DeliveryConfiguration(url: url)
        config.batchSize = try args.integer("--batch", default: 50, in: 1...100_000)
        if args.value("--catch-up-batch") != nil {
            config.catchUpBatchSize = try args.integer("--catch-up-batch", default: config.batchSize, in: 1...1_000_000)
        }
        config.maxRequestsInFlight = try args.integer("--window", default: config.maxRequestsInFlight, in: 1...64)
        config.flushInterval = nil
        config.gzip = args.has("--gzip")
        switch try args.choice("--format", ["array", "envelope", "ndjson"], default: "array") {
        case "envelope": config.format = .envelope
        case "ndjson": config.format = .ndjson
        default: config.format = .jsonArray
        }
        for header in args.allValues("--header") {
            guard let colon = header.firstIndex(of: ":") else { throw CLIError(.usage, "--header takes 'Name: value' (a colon after the name)") }
            let name = header[..<colon].trimmingCharacters(in: .whitespaces)
            let value = header[header.index(after: colon)...].trimmingCharacters(in: .whitespaces)
            guard !name.isEmpty, !name.contains(" ") else { throw CLIError(.usage, "--header has an empty or spaced header name") }
            config.headers[name] = value
        }
        let retries = try args.integer("--retries", default: 5, in: 0...1_000_000)
        let grace = try args.integer("--grace", default: 1, in: 0...3_600)
        let follow = args.has("--follow")
        let directory = args.positionals[0]
        Interruption.install()
        let log = try LogOpening.open(directory, access: .read)
        defer { try? log.close() }
        // A storage failure also ends the flush, whose error is printed below: not twice.
        let uploader = try Uploader(log: log, configuration: config, transport: transport, diagnostics: { diagnostic in
            if diagnostic.deliveryError?.code != .storage { Console.writeError("beacon send: \(diagnostic.message)\n") }
        })
        let metricsServer = try args.value("--metrics").map { try MetricsEndpoint.start($0, uploader: uploader) }
        defer { metricsServer?.stop() }
        if let metricsServer { Console.writeError("beacon send: metrics at http://\(metricsServer.address)/metrics\n") }
        // --follow wakes when the writer appends (inotify), not on a timer.
        let watcher = follow ? LogWatcher(directory: directory) : nil
        if let reason = watcher?.unavailable { Console.writeError("beacon send: \(reason); looking for new events every 0.5 s instead\n") }
        var sent = 0
        var failures = 0
        while Interruption.signal == 0 {
            watcher?.reset()
            // A signal stops the flush: nothing new goes out, the answers to the requests sent
            // are awaited within the grace (a 2xx acknowledged, so a clean stop sends nothing
            // twice at the next start); one still unanswered then is cancelled, its events stay
            // pending and go next time with the same idempotency key.
            let result = waitFor({ await uploader.flush() }, onSignal: {
                if grace > 0 { Console.writeError("beacon send: signal \(Interruption.signal): sending nothing new, waiting up to \(grace) s for the answers to the requests in flight\n") }
                _ = await uploader.finishRequestsInFlight(within: .seconds(grace))
            })
            sent += result.sent
            if Interruption.signal != 0 { break }
            switch result.outcome {
            case .drained, .noData, .deadlineReached:
                failures = 0
                if !follow {
                    Console.writeError("beacon send: sent \(sent) events to \(RedactedURL(url)); nothing pending\(setAside(result, in: directory))\n")
                    return ExitCode.ok.rawValue
                }
                watcher?.waitForAppend()
            case .failed(let error):
                // Failures in a row without progress: a flush that delivered something resets it.
                if result.sent > 0 { failures = 0 }
                failures += 1
                let configurationProblem = error.code == .configuration
                if !follow && (configurationProblem || failures > retries) {
                    Console.writeError("beacon send: \(error); sent \(sent) events, \(result.remaining) stay pending in \(directory)\(setAside(result, in: directory))\n")
                    return ExitCode.ioError.rawValue
                }
                if !configurationProblem { Console.writeError("beacon send: \(error)\n") }
                backOff(config.backoff.delay(afterFailures: failures), after: error, url: url, transport: transport, requestTimeout: config.requestTimeout)
            }
        }
        _ = waitFor { await uploader.shutdown(timeout: .zero) }
        Console.writeError("beacon send: stopped by signal \(Interruption.signal) after sending \(sent) events\n")
        return ExitCode.ok.rawValue
    }

    /// The TLS settings of `--cacert`, `--cert` and `--key`; nil when none is given.
    static func tlsConfiguration(_ args: ParsedArguments) throws -> TLSConfiguration? {
        let caPath = args.value("--cacert"), certificate = args.value("--cert"), key = args.value("--key")
        guard caPath != nil || certificate != nil || key != nil else { return nil }
        guard (certificate == nil) == (key == nil) else { throw CLIError(.usage, "--cert and --key go together (the client certificate and its key)") }
        var isDirectory: ObjCBool = false
        let caIsDirectory = caPath.map { FileManager.default.fileExists(atPath: $0, isDirectory: &isDirectory) && isDirectory.boolValue } ?? false
        return TLSConfiguration(caFile: caIsDirectory ? nil : caPath, caDirectory: caIsDirectory ? caPath : nil, certificateFile: certificate, privateKeyFile: key)
    }

    /// Beacon's own transport with `tls` (files unreadable or not PEM: a usage error).
    static func socketTransport(_ tls: TLSConfiguration?) throws -> SocketTransport {
        guard let tls else { return SocketTransport() }
        do { return try SocketTransport(tls: tls) } catch { throw CLIError(.usage, error.message) }
    }

    /// `; N set aside (rejected R, expired E) in DIR/rejected.jsonl`, or nothing when none were.
    static func setAside(_ result: FlushResult, in directory: String) -> String {
        let losses = result.dropped.filter { $0.value > 0 }.sorted { $0.key.name < $1.key.name }
        guard !losses.isEmpty else { return "" }
        return "; \(result.droppedTotal) set aside (\(losses.map { "\($0.key) \($0.value)" }.joined(separator: ", "))) in \(directory)/rejected.jsonl"
    }

    /// Runs `body` on the concurrency pool and waits for it on this thread (in `poll`, with no
    /// periodic wakeup). On SIGINT or SIGTERM meanwhile, `onSignal` runs once beside it (to make
    /// `body` return early) and the wait goes on until `body` returns.
    ///
    /// Returns only after the tasks let go of `body` and `onSignal` and of what they captured: the
    /// last reference to the uploader is then this thread's, and what its deinitializers do (a TLS
    /// goodbye, `SSL_free`) happens here, before `exit`, never on a worker thread racing
    /// `OPENSSL_cleanup` in `exit` (issue 26: SIGSEGV at exit after a TLS send).
    static func waitFor<T: Sendable>(_ body: @escaping @Sendable () async -> T, onSignal: (@Sendable () async -> Void)? = nil) -> T {
        let done = SocketWaker()
        let box = Mutex<T?>(nil)
        let work = ClosureSlot(body)
        Task {
            var taken = work.take()
            let value = await taken!()
            taken = nil  // released before the wake: see above
            box.withLock { $0 = value }
            done.wake()
        }
        var signalled = false
        let signalHandled = DispatchSemaphore(value: 0)
        while box.withLock({ $0 == nil }) {
            let watchSignal = onSignal != nil && !signalled
            let ready = Readiness.waitReadable(watchSignal ? [done.fd, Interruption.fd] : [done.fd], timeout: done.fd < 0 ? .milliseconds(100) : nil)
            if watchSignal, ready.contains(1) || Interruption.signal != 0, let onSignal {
                signalled = true
                let handler = ClosureSlot(onSignal)
                Task {
                    var taken = handler.take()
                    await taken!()
                    taken = nil
                    signalHandled.signal()
                }
            }
        }
        // Blocking here is fine: this is the process's main thread, not one of the pool's.
        if signalled { signalHandled.wait() }
        return box.withLock { $0! }
    }

    /// Waits `delay` after a failed flush, returning early on SIGINT/SIGTERM and, after a failure
    /// without an answer (connection refused, reset, a timeout), as soon as a probe (a connect and
    /// the TLS handshake, no request; every 500 ms, on this thread) sees the collector come back
    /// after seeing it down: ``ResumeProbe``'s rules, which the library's delivery loop follows too.
    static func backOff(_ delay: Duration, after error: DeliveryError, url: URL, transport: any Transport, requestTimeout: Duration) {
        guard error.isUnanswered, let prober = transport as? any ReachabilityProbing else {
            pauseUnlessInterrupted(delay)
            return
        }
        let clock = ContinuousClock(), start = clock.now
        var probe = ResumeProbe()
        probe.failed(retryAt: delay, unanswered: true)
        let cancellation = ProbeCancellation()
        while Interruption.signal == 0 {
            let now = start.duration(to: clock.now)
            switch probe.step(now: now, retryAt: delay) {
            case .retry:
                return
            case .probe:
                let reachable = prober.probe(url, timeout: min(probe.timeout, requestTimeout), cancellation: cancellation)
                probe.probed(reachable: reachable, at: start.duration(to: clock.now))
            case .wait(let until):
                pauseUnlessInterrupted(until - now)
            }
        }
    }

    /// Waits up to `duration`, returning early on SIGINT/SIGTERM.
    static func pauseUnlessInterrupted(_ duration: Duration) {
        _ = Readiness.waitReadable([Interruption.fd], timeout: duration)
    }
}

/// A closure handed to a task that takes it out, so that the task can let go of it (and of what
/// it captured) at a point of its choosing instead of when the task's own closure is destroyed.
final class ClosureSlot<Function: Sendable>: Sendable {
    private let slot: Mutex<Function?>

    init(_ function: Function) {
        slot = Mutex(function)
    }

    /// The closure; nil after the first call.
    func take() -> Function? {
        slot.withLock { value in
            defer { value = nil }
            return value
        }
    }
}
