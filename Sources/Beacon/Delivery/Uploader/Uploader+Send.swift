import BeaconHTTP
import Foundation

extension Uploader {
    /// Builds and sends one request; the single place a request goes out. Returns the answer, the
    /// body's size as sent and how long it took. Headers are never logged.
    func send(records: [ArraySlice<UInt8>], seqs: [UInt64], crcs: [UInt32] = [], payload: RequestBuilder.Payload? = nil, retry: Int, timeout: Duration) async -> (Result<TransportResponse, TransportError>, bytes: Int, elapsed: Duration) {
        if retry > 0 { counters.retries += 1 }
        let sentAt = nowMillis
        let request = requests.request(records: records, seqs: seqs, crcs: crcs, payload: payload, sentAt: sentAt, retry: retry, timeout: timeout)
        observeSending(events: records.count)
        let started = time.now()
        let result: Result<TransportResponse, TransportError>
        do {
            result = .success(try await transport.send(request))
        } catch let error as TransportError {
            result = .failure(error)
        } catch is CancellationError {
            result = .failure(TransportError(.cancelled, "the request was cancelled"))
        } catch {
            result = .failure(TransportError(.network, "\(error)"))
        }
        let elapsed = time.now() - started
        observeAnswer(result, events: records.count, elapsed: elapsed)
        let receivedAt = nowMillis
        if case .success(let response) = result {
            counters.lastStatus = response.status
            if let date = response.headers["Date"], let seconds = collectorSeconds(date) {
                let midpoint = sentAt + (receivedAt - sentAt) / 2
                counters.clockSkew = .milliseconds(seconds * 1000 + 500 - midpoint)
            }
        }
        return (result, request.content.count, elapsed)
    }

    /// The collector's `Date` header in seconds since 1970; the same text as the last answer's
    /// (a second holds many answers) is not parsed again.
    func collectorSeconds(_ date: String) -> Int64? {
        if let last = lastCollectorDate, last.text == date { return last.seconds }
        guard let seconds = HTTPDate.parse(date) else { return nil }
        lastCollectorDate = (date, seconds)
        return seconds
    }
}
