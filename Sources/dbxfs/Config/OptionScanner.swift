/// A small command-line scanner shared by the subcommands (auth, unlink, status, sync): long
/// options with `--name value` or `--name=value`, flags, positionals, `--` to end options, and
/// one-line errors for anything unknown. (The mount command has its own parser in MountOptions.)
struct OptionScanner {
    struct UsageError: Error, CustomStringConvertible { var description: String }

    private let arguments: [String]
    private var index = 0
    private var endOfOptions = false
    let command: String

    init(_ arguments: [String], command: String) {
        self.arguments = arguments
        self.command = command
    }

    enum Item: Equatable {
        case option(String, inline: String?)
        case positional(String)
    }

    /// The next option or positional, nil at the end.
    mutating func next() -> Item? {
        guard index < arguments.count else { return nil }
        let argument = arguments[index]
        index += 1
        if !endOfOptions && argument == "--" {
            endOfOptions = true
            return next()
        }
        if endOfOptions || !argument.hasPrefix("-") || argument == "-" { return .positional(argument) }
        if argument.hasPrefix("--"), let equals = argument.firstIndex(of: "=") {
            return .option(String(argument[..<equals]), inline: String(argument[argument.index(after: equals)...]))
        }
        return .option(argument, inline: nil)
    }

    /// The value of the option just returned by `next()`.
    mutating func value(for name: String, inline: String?) throws(UsageError) -> String {
        if let inline { return inline }
        guard index < arguments.count else { throw UsageError(description: "option \(name) needs a value") }
        index += 1
        return arguments[index - 1]
    }

    func unknown(_ name: String) -> UsageError {
        UsageError(description: "unknown option '\(name)' for '\(command)' (see dbxfs \(command) --help)")
    }

    func flagTakesNoValue(_ name: String, _ inline: String?) throws(UsageError) {
        if inline != nil { throw UsageError(description: "option \(name) takes no value") }
    }
}
