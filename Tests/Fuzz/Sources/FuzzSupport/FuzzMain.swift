import CFuzzDriver
import Foundation

/// The `main` of every fuzz target.
///
/// Built with `-Xswiftc -DFUZZING -Xswiftc -sanitize=fuzzer,address` (what `Benchmarks/fuzz.sh`
/// does), it hands the command line to libFuzzer. Built plainly, it replays: each argument is an
/// input file or a directory of them (a corpus, or crash files), run once each, which is how a
/// crash file is reproduced under the debugger or without the sanitizers.
public enum FuzzMain {
    nonisolated(unsafe) static var check: ([UInt8]) -> Void = { _ in }

    /// Runs `check` on every input; a broken promise ends the process (`precondition`), which
    /// libFuzzer reports as a crash and saves the input.
    public static func run(_ check: @escaping ([UInt8]) -> Void) -> Never {
        Self.check = check
        #if FUZZING
        var argc = CommandLine.argc
        var argv: UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>? = CommandLine.unsafeArgv
        let status = LLVMFuzzerRunDriver(&argc, &argv) { data, size in fuzzerTestOneInput(data, size) }
        exit(status)
        #else
        var count = 0
        for argument in CommandLine.arguments.dropFirst() {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: argument, isDirectory: &isDirectory) else {
                FileHandle.standardError.write(Data("no such file or directory: \(argument)\n".utf8))
                exit(2)
            }
            let files = isDirectory.boolValue
                ? ((try? FileManager.default.contentsOfDirectory(atPath: argument)) ?? []).sorted().map { argument + "/" + $0 }
                : [argument]
            for file in files {
                guard let data = FileManager.default.contents(atPath: file) else { continue }
                check(Array(data))
                count += 1
            }
        }
        print("replayed \(count) inputs: no promise broken")
        exit(0)
        #endif
    }
}

/// Fuzz input read front to back: the leading bytes steer choices, the rest is data.
public struct FuzzInput {
    public var bytes: [UInt8]
    public var index = 0

    public init(_ bytes: [UInt8]) { self.bytes = bytes }

    /// The next byte, 0 once the input is used up.
    public mutating func byte() -> UInt8 {
        guard index < bytes.count else { return 0 }
        defer { index += 1 }
        return bytes[index]
    }

    /// Everything not read yet.
    public mutating func rest() -> [UInt8] {
        defer { index = bytes.count }
        return Array(bytes[min(index, bytes.count)...])
    }
}

/// Fails the run (libFuzzer saves the input) with what broke.
public func promise(_ condition: @autoclosure () -> Bool, _ what: @autoclosure () -> String, file: StaticString = #fileID, line: UInt = #line) {
    if !condition() {
        FileHandle.standardError.write(Data("broken promise: \(what())\n".utf8))
        fatalError("broken promise: \(what())", file: file, line: line)
    }
}

#if FUZZING
/// libFuzzer's callback. `-sanitize=fuzzer` links libFuzzer's own `main` too, which needs this
/// symbol; the program's `main` (the target's main.swift) still runs first and starts libFuzzer
/// through ``FuzzMain/run(_:)``.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzerTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> Int32 {
    FuzzMain.check(data.map { Array(UnsafeBufferPointer(start: $0, count: size)) } ?? [])
    return 0
}
#endif
