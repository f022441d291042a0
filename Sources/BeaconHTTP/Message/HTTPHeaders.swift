/// HTTP header fields in order, repeated names kept: the one header type of requests, answers,
/// `DeliveryConfiguration.headers` (Beacon) and the loopback collector's recorded requests.
///
/// Names compare without regard to ASCII case (RFC 9110 §5.1) and keep the spelling they were
/// given. The subscript reads the first field of a name and, when set, replaces every field of
/// that name, so configuring a header reads like a dictionary; ``add(name:value:)`` and
/// ``values(for:)`` handle fields that repeat (`Set-Cookie`, `Warning`, `Link`).
///
/// ```swift
/// var headers: HTTPHeaders = ["Authorization": "Bearer …"]
/// headers["X-Tenant"] = "shop"
/// headers.add(name: "Link", value: "</a>; rel=next")
/// headers.add(name: "Link", value: "</b>; rel=last")
/// headers.values(for: "link")   // both, in order
/// ```
///
/// Values may be secrets (`Authorization`): ``description`` prints names only.
public struct HTTPHeaders: Sendable, Hashable, RandomAccessCollection, ExpressibleByDictionaryLiteral,
    ExpressibleByArrayLiteral, CustomStringConvertible
{
    /// One field as stored: tuples are not `Hashable`.
    private struct Field: Sendable, Hashable {
        var name: String
        var value: String
    }

    private var fields: [Field]

    /// No fields.
    public init() { fields = [] }

    /// `fields` in order.
    public init(_ fields: [(name: String, value: String)]) {
        self.fields = fields.map { Field(name: $0.name, value: $0.value) }
    }

    /// `["Name": "value", …]`, in the order written.
    public init(dictionaryLiteral elements: (String, String)...) {
        fields = elements.map { Field(name: $0.0, value: $0.1) }
    }

    /// `[("Name", "value"), …]`, in the order written; a name may repeat.
    public init(arrayLiteral elements: (String, String)...) {
        fields = elements.map { Field(name: $0.0, value: $0.1) }
    }

    /// The first value of `name` (any case), or nil. Setting a value replaces every field of that
    /// name (in the place of the first); setting nil removes them.
    public subscript(name: String) -> String? {
        get { fields.first { HTTPFieldName.equal($0.name, name) }?.value }
        set {
            let first = fields.firstIndex { HTTPFieldName.equal($0.name, name) }
            guard let newValue else {
                fields.removeAll { HTTPFieldName.equal($0.name, name) }
                return
            }
            guard let first else {
                fields.append(Field(name: name, value: newValue))
                return
            }
            fields[first].value = newValue
            var index = fields.index(after: first)
            while index < fields.endIndex {
                if HTTPFieldName.equal(fields[index].name, name) { fields.remove(at: index) } else { index += 1 }
            }
        }
    }

    /// Every value of `name` (any case), in order.
    public func values(for name: String) -> [String] {
        fields.filter { HTTPFieldName.equal($0.name, name) }.map(\.value)
    }

    /// Appends a field, keeping those of the same name.
    public mutating func add(name: String, value: String) {
        fields.append(Field(name: name, value: value))
    }

    /// Whether a field named `name` (any case) is present.
    public func contains(_ name: String) -> Bool {
        fields.contains { HTTPFieldName.equal($0.name, name) }
    }

    /// The position of the first field.
    public var startIndex: Int { fields.startIndex }
    /// The position after the last field.
    public var endIndex: Int { fields.endIndex }
    /// The field at `position`.
    public subscript(position: Int) -> (name: String, value: String) { (fields[position].name, fields[position].value) }

    /// The names, in order; values are left out because they may be secrets.
    public var description: String { "[" + fields.map(\.name).joined(separator: ", ") + "]" }
}

/// Header field names compared as HTTP compares them: ASCII letters without regard to case
/// (RFC 9110 §5.1), byte by byte, without Foundation's locale-aware comparison.
enum HTTPFieldName {
    static func equal(_ a: String, _ b: String) -> Bool {
        // Names of other lengths (most, when an answer's few fields are looked through) differ
        // at once: a native string knows its UTF-8 length.
        guard a.utf8.count == b.utf8.count else { return false }
        var a = a.utf8.makeIterator(), b = b.utf8.makeIterator()
        while true {
            switch (a.next(), b.next()) {
            case (nil, nil): return true
            case (let x?, let y?) where x == y || (x | 0x20 == y | 0x20 && (x | 0x20) >= 0x61 && (x | 0x20) <= 0x7A): continue
            default: return false
            }
        }
    }
}
