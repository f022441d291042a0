import Glibc

/// The `beacon` tool: the command registry, dispatch and help.
enum BeaconTool {
    /// Every command, in the order `beacon help` lists them. One line per command.
    static var commands: [any Command.Type] {
        [
            AppendCommand.self,
            TrackCommand.self,
            DrainCommand.self,
            SendCommand.self,
            CollectCommand.self,
            CatCommand.self,
            StatusCommand.self,
            VerifyCommand.self,
            HelpCommand.self,
        ]
    }

    /// The command named `name`, if any.
    static func command(named name: String) -> (any Command.Type)? {
        commands.first { $0.name == name }
    }

    /// Runs `beacon` with `arguments` (without the program name) and returns the exit code.
    static func main(_ arguments: [String]) -> Int32 {
        // A closed pipe (`beacon cat DIR | head`) must be an EPIPE error we handle, not a silent death.
        signal(SIGPIPE, SIG_IGN)
        guard let name = arguments.first else {
            Console.writeError(overview())
            return ExitCode.usage.rawValue
        }
        if name == "--help" || name == "-h" {
            return HelpCommand.printOverview()
        }
        guard let command = command(named: name) else {
            Console.writeError("beacon: unknown command '\(name)'\n\n" + overview())
            return ExitCode.usage.rawValue
        }
        let rest = Array(arguments.dropFirst())
        if rest.contains("--help") || rest.contains("-h") {
            return HelpCommand.printUsage(of: command)
        }
        return run(command, rest)
    }

    /// Runs one command, turning what it throws into a message on stderr and an exit code.
    static func run(_ command: any Command.Type, _ arguments: [String]) -> Int32 {
        do {
            return try command.run(arguments)
        } catch let error as CLIError {
            var text = "beacon \(command.name): \(error.message)\n"
            if error.code == .usage { text += "\nusage: \(command.usage)\n" }
            Console.writeError(text)
            return error.code.rawValue
        } catch {
            let code = ExitCode.forError(error)
            Console.writeError("beacon \(command.name): \(CLIError.describe(error))\n")
            return code.rawValue
        }
    }

    /// The text of `beacon help`: commands, exit codes.
    static func overview() -> String {
        var text = "beacon: inspect, fill and drain Beacon log directories\n\nusage: beacon COMMAND [ARGS...]\n\ncommands:\n"
        let width = commands.map { $0.name.count }.max() ?? 0
        for command in commands {
            text += "  " + command.name + String(repeating: " ", count: width - command.name.count + 2) + command.summary + "\n"
        }
        text += "\nRun 'beacon help COMMAND' for a command's arguments.\n\nexit codes:\n"
        for code in ExitCode.allCases {
            let number = String(code.rawValue)
            text += "  " + String(repeating: " ", count: 3 - number.count) + number + "  " + code.meaning + "\n"
        }
        return text
    }
}
