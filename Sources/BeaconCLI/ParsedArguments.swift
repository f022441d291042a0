import Beacon
import BeaconHTTP

/// A command's arguments split into options with values, boolean flags and positionals.
///
/// Options take a value as `--name VALUE` or `--name=VALUE` and may repeat; flags take none;
/// `--` ends the flags. An unknown flag, an option without its value or the wrong number of
/// positionals throws a ``CLIError`` with code ``ExitCode/usage``.
///
/// ```swift
/// let args = try ParsedArguments(arguments, options: ["--batch"], flags: ["--json"], positionals: 1...1)
/// let batch = try args.integer("--batch", default: 1000, in: 1...1_000_000)
/// ```
struct ParsedArguments: Sendable {
    /// Arguments that are not flags or option values, in order.
    private(set) var positionals: [String] = []
    /// Option values by name (with the dashes), in the order given.
    private(set) var values: [String: [String]] = [:]
    /// Flags that were given.
    private(set) var flags: Set<String> = []

    /// Parses `arguments`.
    /// - Parameters:
    ///   - options: names (`"--sync"`) of the options that take a value.
    ///   - flags: names of the boolean flags.
    ///   - positionals: how many positional arguments the command takes.
    ///   - names: what the positionals are, for the "missing" message (`["DIR"]`).
    init(_ arguments: [String], options: Set<String> = [], flags allowedFlags: Set<String> = [], positionals count: ClosedRange<Int> = 0...0, names: [String] = ["DIR"]) throws {
        var index = 0
        var flagsEnded = false
        while index < arguments.count {
            let argument = arguments[index]
            index += 1
            if flagsEnded || !argument.hasPrefix("-") || argument == "-" {
                positionals.append(argument)
                continue
            }
            if argument == "--" {
                flagsEnded = true
                continue
            }
            var name = argument
            var inline: String?
            if let equals = argument.firstIndex(of: "=") {
                name = String(argument[..<equals])
                inline = String(argument[argument.index(after: equals)...])
            }
            if options.contains(name) {
                if let inline {
                    values[name, default: []].append(inline)
                } else if index < arguments.count {
                    values[name, default: []].append(arguments[index])
                    index += 1
                } else {
                    throw CLIError(.usage, "\(name) needs a value")
                }
            } else if allowedFlags.contains(name) {
                if inline != nil { throw CLIError(.usage, "\(name) takes no value") }
                flags.insert(name)
            } else {
                throw CLIError(.usage, "unknown flag \(name)")
            }
        }
        if positionals.count < count.lowerBound {
            let missing = positionals.count < names.count ? names[positionals.count] : "an argument"
            throw CLIError(.usage, "missing \(missing)")
        }
        if positionals.count > count.upperBound {
            throw CLIError(.usage, "unexpected argument '\(Self.displayed(positionals[count.upperBound]))'")
        }
    }

    /// An argument as it may be echoed in an error: a URL loses its credentials and query values.
    static func displayed(_ argument: String) -> String {
        argument.contains("://") ? RedactedURL(text: argument).description : argument
    }

    /// Whether the flag `name` was given.
    func has(_ name: String) -> Bool { flags.contains(name) }

    /// The last value given for option `name`, or nil.
    func value(_ name: String) -> String? { values[name]?.last }

    /// Every value given for a repeatable option, in order.
    func allValues(_ name: String) -> [String] { values[name] ?? [] }

    /// The option's value as an integer in `range`, or `defaultValue` when it is absent.
    /// Accepts `_` separators and the suffixes k, m, g (×1000) and KiB, MiB, GiB (×1024).
    func integer(_ name: String, default defaultValue: Int, in range: ClosedRange<Int>) throws -> Int {
        guard let text = value(name) else { return defaultValue }
        guard let number = Self.parseInteger(text), range.contains(number) else {
            throw CLIError(.usage, "\(name) must be an integer from \(range.lowerBound) to \(range.upperBound), not '\(text)'")
        }
        return number
    }

    /// The option's value as a size in bytes in `range`, or `defaultValue` when it is absent.
    /// Accepts the suffixes KiB, MiB, GiB (powers of 1024) and KB, MB, GB (powers of 1000, as
    /// `k`, `m`, `g`); a value out of range names the bounds in bytes and in MiB.
    func size(_ name: String, default defaultValue: Int, in range: ClosedRange<Int>) throws -> Int {
        guard let text = value(name) else { return defaultValue }
        guard let number = Self.parseInteger(text), range.contains(number) else {
            let upper = range.upperBound == Int.max ? "" : " and at most \(Self.describeSize(range.upperBound))"
            throw CLIError(.usage, "\(name) must be a size of at least \(Self.describeSize(range.lowerBound))\(upper), not '\(text)' (\(Self.sizeSuffixes))")
        }
        return number
    }

    /// What `size(_:default:in:)` accepts, for messages and `--help`.
    static let sizeSuffixes = "bytes, or with a suffix: KiB, MiB, GiB are powers of 1024, KB, MB, GB powers of 1000"

    /// `16MiB (16777216 bytes)`; bytes alone when the size is not a whole number of KiB.
    static func describeSize(_ bytes: Int) -> String {
        for (suffix, factor) in [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] where bytes >= factor && bytes % factor == 0 {
            return "\(bytes / factor)\(suffix) (\(bytes) bytes)"
        }
        return "\(bytes) bytes"
    }

    /// The option's value, which must be one of `choices`, or `defaultValue` when it is absent.
    func choice(_ name: String, _ choices: [String], default defaultValue: String) throws -> String {
        guard let text = value(name) else { return defaultValue }
        guard choices.contains(text) else {
            throw CLIError(.usage, "\(name) must be one of \(choices.joined(separator: ", ")), not '\(text)'")
        }
        return text
    }

    /// Parses `12`, `1_000`, `200k`, `2m`, `64KiB`, `1GiB`, `8MB` (KB, MB, GB are decimal, as
    /// k, m, g); nil if it is not such a number.
    static func parseInteger(_ text: String) -> Int? {
        var digits = String(text.filter { $0 != "_" })
        var multiplier = 1
        for (suffix, factor) in [("KiB", 1 << 10), ("MiB", 1 << 20), ("GiB", 1 << 30), ("KB", 1000), ("MB", 1_000_000), ("GB", 1_000_000_000), ("k", 1000), ("m", 1_000_000), ("g", 1_000_000_000)]
        where digits.hasSuffix(suffix) {
            digits.removeLast(suffix.count)
            multiplier = factor
            break
        }
        guard let number = Int(digits) else { return nil }
        let (product, overflow) = number.multipliedReportingOverflow(by: multiplier)
        return overflow ? nil : product
    }
}
