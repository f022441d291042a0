import BeaconTestSupport
import Foundation

/// What the tools said: their logs, `beacon status --json`, `rejected.jsonl`.
extension ChaosRun {
    /// The records `beacon append` said the quota dropped, over all its runs (the sum of the
    /// "dropped N of the oldest pending records" ending each run, in `append.log`): the quota's
    /// own count, of which a sender takes back those delivered after all and those in doubt.
    func appendSaidDropped() -> ChaosAccounting.ToolCount {
        let text = (try? String(contentsOfFile: logDir + "/append.log", encoding: .utf8)) ?? ""
        var count = ChaosAccounting.ToolCount()
        for line in text.split(separator: "\n") {
            guard let range = line.range(of: ") dropped ") else { continue }
            count.dropped += Int(line[range.upperBound...].prefix { $0.isNumber }) ?? 0
        }
        return count
    }

    /// The seqs (here the ids) `beacon send` said the quota deleted after they were sent without
    /// a recorded answer: the "(dropped[quotaInDoubt], maybe delivered): seqs 5-9,12" of its
    /// diagnostics in `send.log`.
    func sendSaidInDoubt() -> [ClosedRange<UInt64>] {
        let text = (try? String(contentsOfFile: logDir + "/send.log", encoding: .utf8)) ?? ""
        var ranges: [ClosedRange<UInt64>] = []
        for line in text.split(separator: "\n") {
            guard let marker = line.range(of: "maybe delivered): seqs ") else { continue }
            let list = line[marker.upperBound...].prefix { $0.isNumber || $0 == "-" || $0 == "," }
            for item in list.split(separator: ",") {
                let bounds = item.split(separator: "-").compactMap { UInt64($0) }
                if let low = bounds.first, let high = bounds.last, low <= high { ranges.append(low...high) }
            }
        }
        return ranges
    }

    /// `beacon status DIR --json`, parsed.
    func status(_ directory: String) throws -> [String: Any] {
        let capture = try SpawnedProcess(options.beacon, ["status", directory, "--json"], stdout: .pipe)
        let data = Data(capture.readOutputToEnd())
        let ending = capture.wait()
        guard ending == .exited(0), let object = try JSONSerialization.jsonObject(with: data) as? [String: Any] else {
            throw ChaosFailure("beacon status \(directory) --json failed (\(ending)): \(String(decoding: data, as: UTF8.self))")
        }
        return object
    }

    /// DIR/rejected.jsonl, one entry per line (none when the file does not exist).
    func readRejected(_ directory: String) throws -> [ChaosAccounting.SetAside] {
        guard let data = FileManager.default.contents(atPath: directory + "/rejected.jsonl") else { return [] }
        return try data.split(separator: 0x0A).map { line in
            let bytes = Array(line)
            guard let object = try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any],
                  let recordStart = bytes.firstRange(of: Array(#""record":"#.utf8)),
                  let id = ChaosEvents.id(in: bytes[recordStart.upperBound...]) else {
                throw ChaosFailure("\(directory)/rejected.jsonl has a line without a record id: \(String(decoding: bytes.prefix(300), as: UTF8.self))")
            }
            return ChaosAccounting.SetAside(id: id, status: object["status"] as? Int, reason: object["reason"] as? String ?? "", at: (object["rejected_at"] as? NSNumber)?.int64Value ?? 0, line: String(decoding: bytes.prefix(400), as: UTF8.self))
        }
    }
}

func format(_ value: Double) -> String { String(format: "%.1f", value) }

/// 1234567 → "1,234,567".
func grouped(_ value: Int) -> String {
    let digits = String(value.magnitude)
    var out = ""
    for (index, character) in digits.enumerated() {
        if index > 0 && (digits.count - index) % 3 == 0 { out += "," }
        out.append(character)
    }
    return (value < 0 ? "-" : "") + out
}
