/// The event time of a stored event without parsing it: the integer after its first `"time":`.
/// The tracker writes `time` before `properties`, so the first match is the top-level field.
enum EventTime {
    static let key = Array(#""time":"#.utf8)

    static func millis(in record: ArraySlice<UInt8>) -> Int64? {
        record.withUnsafeBufferPointer { buffer -> Int64? in
            let n = buffer.count, k = key.count
            guard n > k else { return nil }
            var i = 0
            while i + k < n {
                if buffer[i] == 0x22 && buffer[i + 1] == 0x74 && buffer[i + 2] == 0x69 && buffer[i + 3] == 0x6D && buffer[i + 4] == 0x65 && buffer[i + 5] == 0x22 && buffer[i + 6] == 0x3A {
                    var j = i + k
                    while j < n && buffer[j] == 0x20 { j += 1 }
                    var value: Int64 = 0
                    var digits = 0
                    while j < n, buffer[j] >= 0x30, buffer[j] <= 0x39, digits < 18 {
                        value = value * 10 + Int64(buffer[j] - 0x30)
                        j += 1
                        digits += 1
                    }
                    return digits > 0 ? value : nil
                }
                i += 1
            }
            return nil
        }
    }
}
