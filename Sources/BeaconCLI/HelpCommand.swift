/// `beacon help [COMMAND]`: the command list and exit codes, or one command's usage.
struct HelpCommand: Command {
    static let name = "help"
    static let summary = "Print this help, or a command's usage"
    static let usage = """
        beacon help [COMMAND]
          Without COMMAND: lists the commands and the exit codes.
          With COMMAND: prints that command's arguments.
        """

    static func run(_ arguments: [String]) throws -> Int32 {
        let args = try ParsedArguments(arguments, positionals: 0...1)
        guard let name = args.positionals.first else { return printOverview() }
        guard let command = BeaconTool.command(named: name) else {
            throw CLIError(.usage, "unknown command '\(name)'; 'beacon help' lists them")
        }
        return printUsage(of: command)
    }

    static func printOverview() -> Int32 {
        var out = Console.standardOutput
        out.write(BeaconTool.overview())
        return (try? out.flush()) == nil ? ExitCode.ioError.rawValue : ExitCode.ok.rawValue
    }

    static func printUsage(of command: any Command.Type) -> Int32 {
        var out = Console.standardOutput
        out.write("usage: \(command.usage)\n")
        return (try? out.flush()) == nil ? ExitCode.ioError.rawValue : ExitCode.ok.rawValue
    }
}
