/// The time decisions of delivery, as pure functions of monotonic time values (durations since
/// the uploader's clock origin), so they are tested without sleeping.
enum DeliveryTiming {
    /// The timeout of a request that would start at `now`, or nil when it must not start.
    ///
    /// The rule: without a deadline a request gets `requestTimeout`. With one, a request starts
    /// only if the time left before the deadline is more than the last successful request took (and
    /// at least 1 ms), and its timeout is the smaller of `requestTimeout` and the time left: no
    /// request runs past the deadline, and none starts that would likely be cut off.
    static func requestTimeout(now: Duration, deadline: Duration?, requestTimeout: Duration, lastRequestDuration: Duration) -> Duration? {
        guard let deadline else { return requestTimeout }
        let remaining = deadline - now
        guard remaining > max(.milliseconds(1), lastRequestDuration) else { return nil }
        return min(requestTimeout, remaining)
    }

    /// The wait before the next pass after `failedPasses` failed passes in a row (1, 2, …): the
    /// collector's `Retry-After` when it gave one (at most a day), else the backoff.
    static func wait(afterFailedPasses failedPasses: Int, retryAfter: Duration?, backoff: DeliveryConfiguration.Backoff, unit: Double = Double.random(in: 0..<1)) -> Duration {
        if let retryAfter { return min(max(retryAfter, .zero), .seconds(86_400)) }
        return backoff.delay(afterFailures: max(1, failedPasses), unit: unit)
    }

    /// When a flush retries after a failed pass, or nil when it gives up: a flush without a
    /// deadline makes one pass; with one, it retries at `retryAt` if a request may still start then
    /// (``requestTimeout(now:deadline:requestTimeout:lastRequestDuration:)``).
    static func flushRetry(at retryAt: Duration, deadline: Duration?, requestTimeout: Duration, lastRequestDuration: Duration) -> Duration? {
        guard let deadline else { return nil }
        return self.requestTimeout(now: retryAt, deadline: deadline, requestTimeout: requestTimeout, lastRequestDuration: lastRequestDuration) == nil ? nil : retryAt
    }
}
