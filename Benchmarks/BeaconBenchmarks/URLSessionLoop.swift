import Beacon
import Foundation
#if canImport(FoundationNetworking)
import FoundationNetworking
import BeaconURLSession
#endif

/// The upload baseline: a plain URLSession loop, one POST in flight, the bodies built beforehand
/// (JSON arrays of the same events, gzipped when asked), the session configured as
/// `HTTPTransport`'s (ephemeral, one connection per host). What Beacon adds on top of its HTTP
/// client is the difference.
enum URLSessionLoop {
    /// The bodies for `events` cut into requests of `batch` events.
    static func bodies(_ events: [[UInt8]], batch: Int, gzip: Bool) -> [Data] {
        KeepAliveLoop.bodies(events, batch: batch, gzip: gzip).map { Data($0) }
    }

    /// POSTs `bodies` to `url` one after the other; returns the seconds taken. Throws on any
    /// answer other than 2xx.
    static func run(_ bodies: [Data], to url: URL, gzip: Bool) throws -> Double {
        let session = URLSession(configuration: HTTPTransport.sessionConfiguration())
        defer { session.finishTasksAndInvalidate() }
        let answered = DispatchSemaphore(value: 0)
        let outcome = ResultBox<String>()
        return try time {
            for body in bodies {
                var request = URLRequest(url: url)
                request.httpMethod = "POST"
                request.setValue("application/json", forHTTPHeaderField: "Content-Type")
                if gzip { request.setValue("gzip", forHTTPHeaderField: "Content-Encoding") }
                request.httpBody = body
                session.dataTask(with: request) { _, response, error in
                    let status = (response as? HTTPURLResponse)?.statusCode ?? 0
                    outcome.value = (200...299).contains(status) ? nil : "\(error.map { "\($0)" } ?? "HTTP \(status)")"
                    answered.signal()
                }.resume()
                answered.wait()
                if let failure = outcome.value { throw BenchFailure("URLSession loop: \(url) answered \(failure)") }
            }
        }
    }
}
