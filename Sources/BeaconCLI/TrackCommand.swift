import Beacon
import BeaconLog
import Foundation

/// `beacon track DIR EVENT [key=value ...] [--distinct-id ID]`: tracks one event from a shell.
struct TrackCommand: Command {
    static let name = "track"
    static let summary = "Track one event with properties, as the Beacon tracker would"
    static let usage = """
        beacon track DIR EVENT [key=value ...] [--distinct-id ID]
          Tracks EVENT with the given properties through the Beacon tracker: presets, super
          properties, the identity in DIR/identity.json (created if missing) and the same
          validation as Beacon.track. A value that looks like a JSON number, true, false or null
          becomes one; anything else is a string (prefix it with ':' to force a string: zip=:01234).
          The event is durable when the command exits. Takes DIR's writer lock only, so a
          delivering process may hold the reader lock.
          --distinct-id ID   the user of this event instead of the stored identity
          Exit: 0 tracked, 64 usage, 65 invalid event or property (the rule is named), 74 I/O
          error, 75 DIR has a writer.
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let args = try ParsedArguments(arguments, options: ["--distinct-id"], positionals: 2...100_000, names: ["DIR", "EVENT"])
        let directory = args.positionals[0]
        let event = args.positionals[1]
        var properties: [String: PropertyValue] = [:]
        for argument in try KeyValueArgument.parseAll(Array(args.positionals.dropFirst(2))) {
            if properties[argument.key] != nil {
                throw CLIError(.usage, "the property '\(argument.key)' is given twice")
            }
            properties[argument.key] = propertyValue(argument.value)
        }
        try LogOpening.requireDirectory(directory, mayCreate: true)
        var configuration = Beacon.Configuration(directory: directory)
        configuration.lifecycleEvents = false
        configuration.storage.access = .write
        configuration.storage.sharing = try LogOpening.sharing()
        configuration.diagnostics = { diagnostic in Console.writeError("beacon track: \(diagnostic.message)\n") }
        let beacon: Beacon
        do {
            beacon = try Beacon(configuration: configuration)
        } catch let error as BeaconLogError where error.code == .locked {
            let pid = error.lockHolderPID ?? BeaconLog.lockHolder(.writer, directory: directory)
            throw CLIError(.locked, "\(directory) is locked: \(pid.map { $0 > 0 ? "process \($0)" : "another process" } ?? "another process") holds writer.lock (one writer per directory); stop it or try again later")
        }
        do {
            try beacon.validate(event, properties: properties, distinctId: args.value("--distinct-id"))
        } catch {
            beacon.closeNow()
            throw CLIError(.dataError, "\(error)")
        }
        beacon.track(event, properties: properties, distinctId: args.value("--distinct-id"))
        beacon.closeNow()
        let stats = beacon.stats
        if stats.durable < 1 {
            throw CLIError(.ioError, "the event was not written: \(stats.lastError ?? "unknown error")")
        }
        return ExitCode.ok.rawValue
    }

    /// A command-line value as a property: integers that fit in Int stay integers.
    static func propertyValue(_ value: KeyValueArgument.Value) -> PropertyValue {
        switch value {
        case .string(let text): return .string(text)
        case .bool(let flag): return .bool(flag)
        case .null: return .null
        case .number(let text):
            if let integer = Int(text) { return .int(integer) }
            return .double(Double(text) ?? .nan)
        }
    }
}
