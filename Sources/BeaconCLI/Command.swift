/// One `beacon` subcommand.
///
/// Adding a command is one new file with a type conforming to `Command`, plus one line in
/// ``BeaconTool/commands``. Parse with ``ParsedArguments``, open logs with
/// ``LogOpening/open(_:access:configure:)``, write output through ``Console``, and
/// throw ``CLIError`` (or let a `BeaconLogError` through: ``ExitCode/forError(_:)`` maps it).
///
/// ```swift
/// struct HelloCommand: Command {
///     static let name = "hello"
///     static let summary = "Print a greeting"
///     static let usage = "beacon hello NAME [--loud]"
///     static func run(_ arguments: [String]) throws -> Int32 {
///         let args = try ParsedArguments(arguments, options: [], flags: ["--loud"], positionals: 1...1)
///         var out = Console.standardOutput
///         out.write("hello \(args.positionals[0])\n")
///         try out.flush()
///         return ExitCode.ok.rawValue
///     }
/// }
/// ```
protocol Command {
    /// The word that selects the command: `beacon NAME ...`.
    static var name: String { get }
    /// One line for the list in `beacon help`.
    static var summary: String { get }
    /// The synopsis and flag descriptions printed by `beacon help NAME` and after a usage error.
    /// Its first line is the synopsis (`beacon NAME ARG [--flag X]`).
    static var usage: String { get }
    /// Runs the command with the arguments after its name and returns the process's exit code.
    ///
    /// Throw ``CLIError`` for usage errors and failures; the tool prints it and exits with its code.
    static func run(_ arguments: [String]) throws -> Int32
}
