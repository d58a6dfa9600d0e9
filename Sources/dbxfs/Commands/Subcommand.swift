/// The subcommand dispatcher. A subcommand is a name plus a function from its arguments to an
/// exit status; anything that is not a known subcommand name is the mount command's arguments.
///
/// Exit statuses (documented in docs/dbxfs.1 and docs/CLI.md): 0 success, 1 the operation failed (bad
/// token, unreachable server, mount refused), 2 bad command line, 3 (status, sync and the file
/// commands) no dbxfs mount there.
import Foundation
import VFSCache

struct Subcommand: Sendable {
    let name: String
    let summary: String
    let run: @Sendable ([String]) -> Int32

    /// Every subcommand besides mounting. Add new ones here (each in its own file).
    static let all: [Subcommand] = [
        AuthCommand.subcommand, AuthCommand.alias, UnlinkCommand.subcommand,
        StatusCommand.subcommand, SyncCommand.subcommand,
        HistoryCommand.subcommand, CatCommand.subcommand, RestoreCommand.subcommand, UndeleteCommand.subcommand,
        TrashCommand.subcommand, ShareCommand.subcommand, PinCommand.subcommand, PinCommand.unpinSubcommand,
    ]

    /// `dbxfs --help`: the mount usage, then the other commands.
    static var overview: String {
        var text = MountOptions.usage + "\n\ncommands:\n"
        for command in all { text += "  " + command.name.padding(toLength: 22, withPad: " ", startingAt: 0) + command.summary + "\n" }
        text += "\nRun 'dbxfs COMMAND --help' for a command's options. Defaults for the options can be set\n"
        text += "in $XDG_CONFIG_HOME/dbxfs/config (see man dbxfs)."
        return text
    }

    static let version = "0.1.0"

    static func run(_ arguments: [String]) -> Int32 {
        if let first = arguments.first {
            if let command = all.first(where: { $0.name == first }) {
                return command.run(Array(arguments.dropFirst()))
            }
            if first == "--version" || first == "-V" {
                print("dbxfs \(version)")
                return 0
            }
            if arguments.count == 1 && (first == "--help" || first == "-h" || first == "help") {
                print(overview)
                return 0
            }
            if first == "help", arguments.count == 2, let command = all.first(where: { $0.name == arguments[1] }) {
                return command.run(["--help"])
            }
        }
        return MountCommand.run(arguments)
    }
}

/// Writes a command's output on stdout. Output that cannot be written (a full disk under a
/// redirect) ends the command with one line saying why and exit status 1, as coreutils do;
/// `FileHandle.write` would trap (exit 132 and a backtrace). A closed pipe (`dbxfs status |
/// head -1`) ends it quietly.
func writeOutput(_ text: String) { writeOutput(Array(text.utf8)) }

func writeOutput(_ bytes: [UInt8]) {
    guard let failure = writeAll(STDOUT_FILENO, bytes) else { return }
    if failure != EPIPE { printError("cannot write to standard output: \(String(cString: strerror(failure)))") }
    exit(1)
}

/// Writes the single line a failing command leaves for the user, on stderr.
func printError(_ message: String) {
    StandardError.write("dbxfs: \(message)\n")
}
