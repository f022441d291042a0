/// One `beacon` subcommand.
///
/// Adding a command is one new file with a type conforming to `Command`, plus one line in
/// ``BeaconTool/commands``; `beacon help` and `beacon help NAME` pick it up.
///
/// Shared helpers, each in its own file:
/// - ``ParsedArguments``: options with values, flags, positionals; usage errors (exit 64).
/// - ``KeyValueArgument``: `key=value` arguments, typed (`price=9.99` is a number).
/// - ``LogOpening/open(_:access:configure:)``: opens a log; a missing directory or a held lock
///   becomes the right exit code and message (``CLIError/locked(_:_:pid:)``).
/// - ``CLIError`` and ``ExitCode``: throw a `CLIError`, or let a `BeaconLogError` through:
///   ``ExitCode/forError(_:)`` maps it (`.locked` → 75, I/O → 74, bad records → 65).
/// - ``Console``: buffered stdout/stderr with `write(2)`; EPIPE becomes exit 74.
/// - ``JSONValidator`` and Beacon's `JSONBytes.quoted`: validate and write JSON without Foundation.
/// - ``Interruption``: SIGINT/SIGTERM as a request to finish cleanly.
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
