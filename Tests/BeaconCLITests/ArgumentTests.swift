import BeaconLog
import BeaconTestSupport
import Testing
import BeaconTestTraits
@testable import BeaconCLI

@Suite(.blocking) struct ArgumentTests {
    @Test func parsesOptionsFlagsAndPositionals() throws {
        let args = try ParsedArguments(["dir", "--batch", "5", "--json", "--phase=A", "--phase", "B", "--", "--not-a-flag"],
                                       options: ["--batch", "--phase"], flags: ["--json"], positionals: 1...2)
        #expect(args.positionals == ["dir", "--not-a-flag"])
        #expect(try args.integer("--batch", default: 1, in: 1...10) == 5)
        #expect(args.allValues("--phase") == ["A", "B"])
        #expect(args.value("--phase") == "B")
        #expect(args.has("--json"))
        #expect(!args.has("--all"))
    }

    @Test(arguments: [
        (["--bogus", "dir"], "unknown flag --bogus"),
        (["dir", "--batch"], "--batch needs a value"),
        ([], "missing DIR"),
        (["a", "b"], "unexpected argument 'b'"),
        (["dir", "--json=1"], "--json takes no value"),
    ])
    func usageErrors(_ arguments: [String], _ message: String) {
        do {
            _ = try ParsedArguments(arguments, options: ["--batch"], flags: ["--json"], positionals: 1...1)
            Issue.record("no error for \(arguments)")
        } catch let error as CLIError {
            #expect(error.code == .usage)
            #expect(error.message == message)
        } catch {
            Issue.record("unexpected \(error)")
        }
    }

    @Test(arguments: [("12", 12), ("1_000", 1000), ("200k", 200_000), ("2m", 2_000_000), ("64KiB", 65536), ("1GiB", 1 << 30)] as [(String, Int)])
    func integers(_ text: String, _ value: Int) {
        #expect(ParsedArguments.parseInteger(text) == value)
    }

    @Test func integerOutOfRangeOrGarbageIsAUsageError() throws {
        for text in ["0", "x", "-1", "99999999999999999999"] {
            let args = try ParsedArguments(["--batch", text], options: ["--batch"], positionals: 0...0)
            #expect(throws: CLIError.self) { try args.integer("--batch", default: 1, in: 1...100) }
        }
        let args = try ParsedArguments(["--sync", "sometimes"], options: ["--sync"])
        #expect(throws: CLIError.self) { try args.choice("--sync", ["each", "none"], default: "each") }
    }

    @Test(arguments: [("8MB", 8_000_000), ("8KB", 8000), ("1GB", 1_000_000_000), ("8MiB", 8 << 20), ("16MiB", 16 << 20)] as [(String, Int)])
    func sizeSuffixes(_ text: String, _ value: Int) {
        #expect(ParsedArguments.parseInteger(text) == value)
    }

    /// Issue 26 (7): `--max-disk 8MiB` was refused with "must be an integer from 16777216…", and
    /// `--help` named neither the suffixes nor the minimum.
    @Test func maxDiskBelowTheMinimumNamesTheMinimumAndTheSuffixes() throws {
        let result = try withTemporaryDirectory { dir in try BeaconToolRunner.run(["append", dir + "/log", "--max-disk", "8MiB"]) }
        #expect(result.status == 64)
        #expect(result.stderr.contains("--max-disk must be a size of at least 16MiB (16777216 bytes), not '8MiB'"), "\(result.stderr)")
        #expect(result.stderr.contains("KiB, MiB, GiB are powers of 1024, KB, MB, GB powers of 1000"), "\(result.stderr)")
        let help = try BeaconToolRunner.run(["help", "append"])
        #expect(help.stdoutText.contains("at least 16MiB"), "\(help.stdoutText)")
        #expect(help.stdoutText.contains("KiB, MiB, GiB are powers of 1024"), "\(help.stdoutText)")
        #expect(help.stdoutText.contains("KB, MB, GB (and k, m, g) are powers of 1000"), "\(help.stdoutText)")
        let args = try ParsedArguments(["--max-disk", "16MiB"], options: ["--max-disk"])
        #expect(try args.size("--max-disk", default: 0, in: (16 << 20)...Int.max) == 16 << 20)
    }

    @Test func keyValueArguments() throws {
        #expect(try KeyValueArgument("price=9.99").value == .number("9.99"))
        #expect(try KeyValueArgument("count=-3").value == .number("-3"))
        #expect(try KeyValueArgument("vip=true").value == .bool(true))
        #expect(try KeyValueArgument("x=null").value == .null)
        #expect(try KeyValueArgument("zip=01234").value == .string("01234"))
        #expect(try KeyValueArgument("zip=:12").value == .string("12"))
        #expect(try KeyValueArgument("eq=a=b").value == .string("a=b"))
        #expect(try KeyValueArgument("empty=").value == .string(""))
        #expect(try KeyValueArgument("q=say \"hi\"\n").value.json == #""say \"hi\"\n""#)
        #expect(throws: CLIError.self) { try KeyValueArgument("novalue") }
        #expect(throws: CLIError.self) { try KeyValueArgument("=1") }
    }

    /// Every BeaconLog error code maps to the documented exit code.
    @Test(arguments: [
        (BeaconLogError.Code.locked, ExitCode.locked), (.io, .ioError), (.diskFull, .ioError), (.failed, .ioError), (.closed, .ioError),
        (.quotaExceeded, .ioError), (.recordTooLarge, .dataError), (.invalidRecord, .dataError), (.corrupt, .dataError),
        (.invalidArgument, .usage), (.permissionDenied, .ioError),
    ])
    func exitCodeMapping(_ code: BeaconLogError.Code, _ exit: ExitCode) {
        #expect(ExitCode.forError(BeaconLogError(code, "x")) == exit)
    }

    @Test func registryNamesAreUniqueAndEveryCommandHasHelp() {
        let names = BeaconTool.commands.map { $0.name }
        #expect(Set(names).count == names.count)
        for command in BeaconTool.commands {
            #expect(command.usage.hasPrefix("beacon \(command.name)"))
            #expect(!command.summary.isEmpty)
        }
    }
}
