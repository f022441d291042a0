import Foundation
import Testing

/// The shape of `Sources/` that issue 30 asked for, kept: the client's modules free of what sits
/// above them, so that the loopback collector links neither the tracker nor OpenSSL
/// (`Package.swift` draws the pipeline).
@Suite("Sources: what each module may import")
struct SourceLayoutTests {
    static let sources = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent()
        .deletingLastPathComponent().appendingPathComponent("Sources")

    /// Every Swift file under `directory` (a module's folder in `Sources/`), as (path from
    /// `Sources/`, text).
    static func swiftFiles(in directory: String = "") throws -> [(path: String, text: String)] {
        let root = directory.isEmpty ? sources : sources.appendingPathComponent(directory)
        let names = try FileManager.default.subpathsOfDirectory(atPath: root.path).filter { $0.hasSuffix(".swift") }
        return try names.sorted().map { name in
            let text = try String(contentsOf: root.appendingPathComponent(name), encoding: .utf8)
            return (directory.isEmpty ? name : directory + "/" + name, text)
        }
    }

    @Test("the client's modules import nothing above them", arguments: [
        ("BeaconHTTP", ["Beacon", "BeaconLog", "BeaconTLS", "COpenSSL", "BeaconHTTPServer"]),
        ("BeaconTLS", ["Beacon", "BeaconLog", "BeaconHTTPServer"]),
        ("BeaconHTTPServer", ["Beacon", "BeaconLog", "BeaconTLS", "COpenSSL"]),
    ])
    func imports(module: String, forbidden: [String]) throws {
        let files = try Self.swiftFiles(in: module)
        #expect(!files.isEmpty, "no Swift file in Sources/\(module)")
        for (path, text) in files {
            let imported = text.split(separator: "\n").compactMap { line -> String? in
                let words = line.split(separator: " ")
                guard let at = words.firstIndex(of: "import"), words.index(after: at) < words.endIndex else { return nil }
                // `import struct M.T` names M after the kind.
                let kinds: Set<Substring> = ["struct", "class", "enum", "protocol", "func", "var", "let", "typealias"]
                var name = words[words.index(after: at)]
                if kinds.contains(name), words.index(at, offsetBy: 2) < words.endIndex { name = words[words.index(at, offsetBy: 2)] }
                guard words[..<at].allSatisfy({ $0.hasPrefix("@") }) else { return nil }
                return String(name.split(separator: ".").first ?? name)
            }
            let wrong = imported.filter(forbidden.contains)
            #expect(wrong.isEmpty, "Sources/\(path) imports \(wrong): \(module) sits below them (see Package.swift)")
        }
    }
}
