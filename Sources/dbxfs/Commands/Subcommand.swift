/// The subcommand dispatcher. A subcommand is a name plus a function from its arguments to an
/// exit status; anything that is not a known subcommand name is the mount command's arguments.
///
/// Exit statuses (documented in docs/SEMANTICS.md): 0 success, 1 the operation failed (bad token,
/// unreachable server, mount refused), 2 bad command line.
import Foundation

struct Subcommand: Sendable {
    let name: String
    let summary: String
    let run: @Sendable ([String]) -> Int32

    /// Every subcommand besides mounting. Add new ones here (each in its own file).
    static let all: [Subcommand] = []

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
        }
        return MountCommand.run(arguments)
    }
}

/// Writes the single line a failing command leaves for the user, on stderr.
func printError(_ message: String) {
    FileHandle.standardError.write(Data("dbxfs: \(message)\n".utf8))
}
