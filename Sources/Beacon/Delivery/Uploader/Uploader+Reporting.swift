/// What the uploader reports: `rejected.jsonl` lines, failure messages and the delivery counters.
extension Uploader {
    /// The `rejected.jsonl` line of an event the state machine set aside.
    func rejectedEntry(_ aside: DeliveryStateMachine.SetAside, _ session: Session) -> RejectedFile.Entry {
        let i = session.sendable[aside.index]
        let answer = aside.answer
        let said = answer.status.map { "HTTP \($0)" + (answer.detail.isEmpty ? "" : ": " + answer.detail) } ?? answer.detail
        let reason: String
        switch aside.reason {
        case .tooLarge: reason = "too large for the collector (\(answer.status.map { "HTTP \($0)" } ?? "split"))"
        case .refused: reason = said.isEmpty ? "refused" : said
        case .keepsFailing: reason = "failed \(configuration.isolateAfterFailures) times alone while other events were delivered: \(said)"
        }
        return RejectedFile.Entry(status: answer.status, reason: reason, seq: session.batch.seqs[i], record: session.batch.records[i])
    }

    static func hint(_ status: Int) -> String {
        switch status {
        case 401: " (unauthorized: check the Authorization header)"
        case 403: " (forbidden: check the credentials' permissions)"
        case 404: " (not found: check the collector URL)"
        case 407: " (proxy authentication required: check the user and password in the proxy URL: http_proxy, https_proxy, all_proxy)"
        default: ""
        }
    }

    /// The collector's explanation, quoted for a one-line message (cut to 512 bytes).
    static func quote(_ detail: String) -> String {
        detail.isEmpty ? "" : ": \"" + AnswerExcerpt.forMessage(detail) + "\""
    }

    /// The error for a stop the state machine decided on `answer`: its status, the start of its
    /// body (``DeliveryError/answer``) or the transport's error (``DeliveryError/cause``).
    static func error(_ code: DeliveryError.Code, _ message: String, answer: DeliveryStateMachine.Answer) -> DeliveryError {
        DeliveryError(code, message, status: answer.status, answer: answer.status.map { _ in AnswerExcerpt.forMessage(answer.detail) }, cause: answer.cause)
    }

    func counted(failure message: String) {
        counters.failedRequests += 1
        counters.consecutiveFailures += 1
        counters.lastError = message
    }

    func counted(delivered events: Int) {
        counters.sentEvents += UInt64(events)
        observeDelivery(events: events)
        counters.consecutiveFailures = 0
        counters.paused = nil
        counters.lastError = nil
        lastFailure = nil
        failedPasses = 0
    }

    /// Ends a pass with a failure.
    func fail(_ error: DeliveryError, retryAfter: Duration?) -> Failure {
        counters.lastError = error.message
        lastFailure = error
        return Failure(error: error, retryAfter: retryAfter)
    }
}
