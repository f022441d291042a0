import Foundation
import Testing
import BeaconTestTraits

/// Every Swift block of README.md and of the DocC articles (`Sources/*/*.docc/*.md`) is compiled,
/// so the documentation cannot drift from the API:
///
/// - a plain ```` ```swift ```` block must stand verbatim between `// README begin` and
///   `// README end` in a file of `Tests/ReadmeSnippets/` (a target `swift build` compiles), and a
///   block that imports modules must be in a file that imports exactly those;
/// - ```` ```swift service-example ```` marks a block that needs Hummingbird, swift-log or
///   swift-service-lifecycle: it must stand verbatim (indentation aside) in a source file of a
///   package nested in the repository (the service example, with its own `Package.swift`);
/// - ```` ```swift manifest ```` marks a user's `Package.swift`: `swift package dump-package` must
///   evaluate it.
///
/// And every snippet in `Tests/ReadmeSnippets/` must still be in the README or an article.
@Suite("README and articles: every Swift block is compiled", .blocking)
struct ReadmeSnippetTests {
    struct Block: CustomStringConvertible {
        var marker: String
        var lines: [String]
        var file: String
        var line: Int
        var imports: [String] { lines.filter { $0.hasPrefix("import ") } }
        /// The block without its import lines and the blank lines that follow them.
        var code: String {
            var rest = lines.filter { !$0.hasPrefix("import ") }
            while rest.first == "" { rest.removeFirst() }
            return rest.joined(separator: "\n")
        }
        var description: String { "the Swift block of \(file) at line \(line)" }
    }

    static let root = URL(fileURLWithPath: #filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    /// README.md, then the articles of every DocC catalog in `Sources/`, as paths from the root.
    static func documents() throws -> [String] {
        let sources = root.appendingPathComponent("Sources")
        var articles: [String] = []
        for module in try FileManager.default.contentsOfDirectory(atPath: sources.path).sorted() {
            let catalog = sources.appendingPathComponent(module).appendingPathComponent("\(module).docc")
            guard let names = try? FileManager.default.contentsOfDirectory(atPath: catalog.path) else { continue }
            articles += names.filter { $0.hasSuffix(".md") }.sorted().map { "Sources/\(module)/\(module).docc/\($0)" }
        }
        return ["README.md"] + articles
    }

    static func blocks() throws -> [Block] {
        var blocks: [Block] = []
        for document in try documents() {
            let text = try String(contentsOf: root.appendingPathComponent(document), encoding: .utf8)
            var current: Block?
            var indent = 0
            for (index, raw) in text.components(separatedBy: "\n").enumerated() {
                // A block inside a list item is indented: its fence and lines lose that indentation.
                let line = raw.drop { $0 == " " }
                if var block = current {
                    if line.hasPrefix("```") {
                        blocks.append(block)
                        current = nil
                    } else {
                        block.lines.append(String(raw.dropFirst(min(indent, raw.prefix { $0 == " " }.count))))
                        current = block
                    }
                } else if line.hasPrefix("```swift") {
                    indent = raw.count - line.count
                    let marker = line.dropFirst("```swift".count).trimmingCharacters(in: .whitespaces)
                    current = Block(marker: marker, lines: [], file: document, line: index + 1)
                }
            }
        }
        return blocks
    }

    /// The Swift files under `directory`, with their text, skipping build products (`.build` and
    /// the sanitizer and fuzzing builds beside it, `.build-asan`, `.build-fuzz`...).
    static func swiftFiles(under directory: URL) -> [(path: String, text: String)] {
        guard let walker = FileManager.default.enumerator(at: directory, includingPropertiesForKeys: nil) else { return [] }
        var files: [(String, String)] = []
        for case let url as URL in walker {
            if url.lastPathComponent.hasPrefix(".build") || url.lastPathComponent == ".git" { walker.skipDescendants(); continue }
            if url.pathExtension == "swift", let text = try? String(contentsOf: url, encoding: .utf8) { files.append((url.path, text)) }
        }
        return files
    }

    /// The text between the markers of each snippet file.
    static func snippets() -> [(path: String, imports: [String], code: String)] {
        swiftFiles(under: root.appendingPathComponent("Tests/ReadmeSnippets")).compactMap { file in
            guard let begin = file.text.range(of: "// README begin\n"),
                  let end = file.text.range(of: "\n// README end", range: begin.upperBound..<file.text.endIndex) else { return nil }
            let imports = file.text.components(separatedBy: "\n").filter { $0.hasPrefix("import ") }
            return (file.path, imports, String(file.text[begin.upperBound..<end.lowerBound]))
        }
    }

    /// Source files of the packages nested in the repository (each with its own Package.swift).
    static func nestedPackageSources() -> [(path: String, text: String)] {
        let all = swiftFiles(under: root)
        let packages = all.filter { $0.path.hasSuffix("/Package.swift") && $0.path != root.appendingPathComponent("Package.swift").path }
            .map { String($0.path.dropLast("Package.swift".count)) }
        return all.filter { file in packages.contains { file.path.hasPrefix($0) } }
    }

    @Test func theReadmeHasSwiftBlocks() throws {
        #expect(try Self.blocks().count >= 5)
    }

    @Test func everyPlainBlockIsInTheSnippetsTarget() throws {
        let snippets = Self.snippets()
        for block in try Self.blocks() where block.marker.isEmpty {
            let matches = snippets.filter { $0.code == block.code }
            guard let match = matches.first else {
                Issue.record("\(block) is not verbatim in Tests/ReadmeSnippets/: copy it there between `// README begin` and `// README end` (or mark it ```swift service-example if the service example compiles it)")
                continue
            }
            if !block.imports.isEmpty {
                #expect(match.imports == block.imports, "\(block) imports \(block.imports), \(match.path) \(match.imports): the block must compile with its own imports")
            }
        }
    }

    @Test func everySnippetIsStillInTheReadme() throws {
        let codes = Set(try Self.blocks().map(\.code))
        for snippet in Self.snippets() {
            let inReadme = codes.contains(snippet.code)
            #expect(inReadme, "\(snippet.path) holds a snippet neither the README nor an article has any longer: update or remove it")
        }
    }

    @Test func everyServiceExampleBlockIsInTheExamplePackage() throws {
        let blocks = try Self.blocks().filter { $0.marker == "service-example" }
        guard !blocks.isEmpty else { return }
        let sources = Self.nestedPackageSources()
        guard !sources.isEmpty else {
            print("SKIPPED: \(blocks.count) README blocks marked service-example are not checked: no package is nested in the repository yet (the service example)")
            return
        }
        // The example nests snippets in functions: lines are compared without their indentation.
        func lines(_ text: String) -> [String] { text.components(separatedBy: "\n").map { String($0.drop { $0 == " " }) } }
        func holds(_ file: [String], _ run: [String]) -> Bool {
            guard !run.isEmpty, file.count >= run.count else { return run.isEmpty }
            return (0...(file.count - run.count)).contains { Array(file[$0..<($0 + run.count)]) == run }
        }
        for block in blocks {
            let code = lines(block.code)
            let found = sources.contains { file in
                let fileLines = lines(file.text)
                return holds(fileLines, code) && block.imports.allSatisfy(fileLines.contains)
            }
            #expect(found, "\(block) is not verbatim in a source file of the service example package (\(sources.count) files searched)")
        }
    }

    @Test func markersAreKnown() throws {
        for block in try Self.blocks() {
            #expect(["", "manifest", "service-example"].contains(block.marker), "\(block): unknown marker \"\(block.marker)\"")
        }
    }

    @Test(.timeLimit(.minutes(3)))
    func everyManifestBlockEvaluates() async throws {
        for block in try Self.blocks() where block.marker == "manifest" {
            let dir = FileManager.default.temporaryDirectory.appendingPathComponent("beacon-readme-manifest-\(UUID().uuidString)")
            try FileManager.default.createDirectory(at: dir, withIntermediateDirectories: true)
            defer { try? FileManager.default.removeItem(at: dir) }
            try block.lines.joined(separator: "\n").write(to: dir.appendingPathComponent("Package.swift"), atomically: true, encoding: .utf8)
            let ran: (ending: SpawnedProcess.Ending, output: String)
            do { ran = try SpawnedProcess.run("/usr/bin/env", ["swift", "package", "dump-package", "--package-path", dir.path]) } catch {
                print("SKIPPED: \(block) (a manifest) is not evaluated: `swift` could not be started (\(error))")
                return
            }
            let text = ran.output
            #expect(ran.ending == .exited(0), "\(block): swift package dump-package failed (\(ran.ending)): \(text)")
            #expect(text.contains(#""MyService""#), "\(block): \(text.prefix(500))")
        }
    }
}
