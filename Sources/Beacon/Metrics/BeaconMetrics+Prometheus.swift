import BeaconLog
import Foundation

extension BeaconMetrics {
    /// The text formats ``prometheusText(_:)`` writes.
    public enum ExpositionFormat: Sendable, Equatable {
        /// Prometheus' text format 0.0.4 (`text/plain; version=0.0.4`).
        case prometheus
        /// OpenMetrics 1.0 (`application/openmetrics-text`), what a Prometheus server asks for first.
        case openMetrics

        /// The `Content-Type` of an answer in this format.
        public var contentType: String {
            switch self {
            case .prometheus: "text/plain; version=0.0.4; charset=utf-8"
            case .openMetrics: "application/openmetrics-text; version=1.0.0; charset=utf-8"
            }
        }

        /// The format a scraper's `Accept` header asks for: OpenMetrics when it names
        /// `application/openmetrics-text` (without `q=0`), else Prometheus' text format.
        public init(accept: String?) {
            let asksOpenMetrics = (accept ?? "").lowercased().split(separator: ",").contains { range in
                let parts = range.split(separator: ";").map { $0.trimmingCharacters(in: .whitespaces) }
                return parts.first == "application/openmetrics-text" && !parts.dropFirst().contains { $0 == "q=0" || $0 == "q=0.0" }
            }
            self = asksOpenMetrics ? .openMetrics : .prometheus
        }
    }

    /// The snapshot in Prometheus' text exposition format (or OpenMetrics), ready to serve at
    /// `/metrics`: names `beacon_…`, counters `_total`, durations in `_seconds`, sizes in `_bytes`.
    ///
    /// ```swift
    /// let body = (await beacon.metrics).prometheusText()
    /// ```
    public func prometheusText(_ format: ExpositionFormat = .prometheus) -> String {
        var out = Exposition(openMetrics: format == .openMetrics)
        out.gauge("beacon_pending_records", "Records in the log the collector has not acknowledged.", pendingRecords)
        out.gauge("beacon_pending_bytes", "Bytes on disk of the pending records, framing included.", pendingBytes, unit: "bytes")
        out.gauge("beacon_oldest_pending_age_seconds", "Age of the oldest pending event: now minus its time field, or the age of the segment it was appended to when it has none (0 when nothing is pending).",
                  seconds(oldestPending?.age ?? .zero), unit: "seconds")
        out.gauge("beacon_disk_bytes", "Bytes of records in the log's segment files (what the quota counts).", diskBytes, unit: "bytes")
        out.gauge("beacon_disk_quota_bytes", "The log's quota (maxBytes).", maxDiskBytes, unit: "bytes")
        out.counter("beacon_sent_events", "Events the collector accepted (2xx).", sentEvents)
        out.counter("beacon_sent_requests", "Requests the collector accepted (2xx).", sentRequests)
        out.counter("beacon_sent_bytes", "Body bytes of accepted requests, as sent.", sentBytes, unit: "bytes")
        out.counter("beacon_answers", "Requests by outcome: HTTP status class, or timeout, network or tls when there was no answer.",
                    AnswerClass.allCases.map { (["class": $0.rawValue], answers[$0, default: 0]) })
        out.counter("beacon_retries", "Requests sent again after a failure.", retries)
        out.counter("beacon_set_aside_events", "Events set aside in rejected.jsonl, by reason.",
                    Self.labelled(setAside, always: [.rejected, .expired]))
        out.counter("beacon_dropped_events", "Events that will never be delivered, by reason (not in rejected.jsonl).",
                    Self.labelled(dropped, always: [.backpressure, .quotaDeleted]))
        out.counter("beacon_corrupt_records_skipped", "Corrupt records passed over while reading, by reason, since the log directory was created.",
                    Self.labelled(corruptSkipped, always: [.checksum, .malformed, .zeros, .tornTail, .seqDigits]))
        if let lastSuccess {
            out.gauge("beacon_last_success_timestamp_seconds", "When the collector last accepted a request (seconds since 1970).", lastSuccess.timeIntervalSince1970, unit: "seconds")
        }
        out.histogram("beacon_request_duration_seconds", "How long each request to the collector took.", requestDuration)
        out.gauge("beacon_requests_in_flight", "Requests sent and not answered yet.", requestsInFlight)
        out.gauge("beacon_events_in_flight", "Events in the requests in flight.", eventsInFlight)
        out.gauge("beacon_delivery_paused", "1 while delivery is paused (collector down or refusing), retried with backoff.", deliveryPaused ? 1 : 0)
        if let writerCommitDuration {
            out.histogram("beacon_writer_commit_duration_seconds", "How long each group commit of the writer took (write, and fsync when due).", writerCommitDuration)
            out.gauge("beacon_writer_stalled", "1 while a commit has run for more than a second (a stalled disk).", writerStalled ? 1 : 0)
        }
        return out.finish()
    }

    func seconds(_ duration: Duration) -> Double {
        Double(duration.components.seconds) + Double(duration.components.attoseconds) * 1e-18
    }

    static func labelled<Reason: CustomStringConvertible & Hashable>(_ counts: [Reason: UInt64], always: [Reason]) -> [([String: String], UInt64)] {
        var all = counts
        for reason in always where all[reason] == nil { all[reason] = 0 }
        return all.map { (["reason": $0.key.description], $0.value) }.sorted { $0.0["reason"]! < $1.0["reason"]! }
    }
}

/// Writes metric families in the Prometheus text format or OpenMetrics.
struct Exposition {
    let openMetrics: Bool
    var text = ""

    init(openMetrics: Bool) {
        self.openMetrics = openMetrics
        text.reserveCapacity(8192)
    }

    mutating func header(_ family: String, _ help: String, _ type: String, unit: String?) {
        text += "# TYPE \(family) \(type)\n"
        if openMetrics, let unit { text += "# UNIT \(family) \(unit)\n" }
        text += "# HELP \(family) \(Self.escapeHelp(help))\n"
    }

    mutating func gauge(_ name: String, _ help: String, _ value: some BinaryInteger, unit: String? = nil) {
        gauge(name, help, Double(value), unit: unit)
    }

    mutating func gauge(_ name: String, _ help: String, _ value: Double, unit: String? = nil) {
        header(name, help, "gauge", unit: unit)
        sample(name, [:], Self.number(value))
    }

    mutating func counter(_ name: String, _ help: String, _ value: UInt64, unit: String? = nil) {
        counter(name, help, [([:], value)], unit: unit)
    }

    /// A counter family `name`: its samples are `name_total` (Prometheus' text format names the
    /// family so too; OpenMetrics names it without the suffix).
    mutating func counter(_ name: String, _ help: String, _ samples: [([String: String], UInt64)], unit: String? = nil) {
        header(openMetrics ? name : name + "_total", help, "counter", unit: unit)
        for (labels, value) in samples { sample(name + "_total", labels, "\(value)") }
    }

    mutating func histogram(_ name: String, _ help: String, _ histogram: BeaconMetrics.Histogram) {
        header(name, help, "histogram", unit: "seconds")
        var cumulative: UInt64 = 0
        for (i, bound) in histogram.bounds.enumerated() {
            cumulative += histogram.counts[i]
            sample(name + "_bucket", ["le": Self.number(bound)], "\(cumulative)")
        }
        sample(name + "_bucket", ["le": "+Inf"], "\(histogram.count)")
        sample(name + "_sum", [:], Self.number(histogram.sum))
        sample(name + "_count", [:], "\(histogram.count)")
    }

    mutating func sample(_ name: String, _ labels: [String: String], _ value: String) {
        text += name
        if !labels.isEmpty {
            text += "{" + labels.sorted { $0.key < $1.key }.map { "\($0.key)=\"\(Self.escapeLabel($0.value))\"" }.joined(separator: ",") + "}"
        }
        text += " " + value + "\n"
    }

    func finish() -> String {
        openMetrics ? text + "# EOF\n" : text
    }

    /// A float as both formats read it: integers without a fraction, others in Swift's shortest
    /// round-tripping form (`0.005`, `1e-05`).
    static func number(_ value: Double) -> String {
        if value.isNaN { return "NaN" }
        if value.isInfinite { return value > 0 ? "+Inf" : "-Inf" }
        if value == value.rounded(), abs(value) < 1e15 { return String(Int64(value)) }
        return "\(value)"
    }

    static func escapeHelp(_ text: String) -> String {
        text.replacingOccurrences(of: "\\", with: "\\\\").replacingOccurrences(of: "\n", with: "\\n")
    }

    static func escapeLabel(_ text: String) -> String {
        escapeHelp(text).replacingOccurrences(of: "\"", with: "\\\"")
    }
}
