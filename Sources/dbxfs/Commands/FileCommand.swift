/// What the file commands (history, cat, restore, undelete, trash, share, pin, unpin) share on the client
/// side: their options, finding the mount a path is on (Control/MountPath), asking its daemon,
/// and the exit statuses of docs/CLI.md: 0 done, 1 the operation failed (the daemon's sentence),
/// 2 bad usage, 3 the path is not on a dbxfs mount.
import DropboxRemote
import Foundation

enum FileCommand {
    /// A step that either goes on with a value or ends the command with an exit status.
    enum Step<T> {
        case value(T)
        case exit(Int32)
    }

    struct Arguments {
        var paths: [String] = []
        var json = false
        var rev: String?
        var limit: Int?
        var expires: Date?
        var password: String?
        /// pin: list the pins instead.
        var list = false
        /// pin: wait until the pinned files are on disk.
        var wait = false
    }

    /// Parses the options in `accepts` (besides --help) and up to `maxPaths` paths; prints the
    /// usage for --help, and a usage error on stderr (exit 2).
    static func parse(_ arguments: [String], command: String, usage: String, accepts: Set<String>,
                      maxPaths: Int = 1) -> Step<Arguments> {
        var parsed = Arguments()
        var help = false
        var scanner = OptionScanner(arguments, command: command)
        do throws(OptionScanner.UsageError) {
            while let item = scanner.next() {
                switch item {
                case .positional(let value):
                    guard parsed.paths.count < maxPaths else {
                        throw OptionScanner.UsageError(description: "too many arguments: \(value) (see dbxfs \(command) --help)")
                    }
                    parsed.paths.append(value)
                case .option(let name, let inline):
                    if name == "-h" || name == "--help" { help = true; continue }
                    guard accepts.contains(name) else { throw scanner.unknown(name) }
                    switch name {
                    case "--json": try scanner.flagTakesNoValue(name, inline); parsed.json = true
                    case "--list": try scanner.flagTakesNoValue(name, inline); parsed.list = true
                    case "--wait": try scanner.flagTakesNoValue(name, inline); parsed.wait = true
                    case "--rev":
                        let rev = try scanner.value(for: name, inline: inline)
                        guard DropboxClient.isWellFormedRev(rev) else {
                            throw OptionScanner.UsageError(description: "--rev '\(rev)' is not a revision: revisions are 9 or more lowercase hex digits, as dbxfs history shows them")
                        }
                        parsed.rev = rev
                    case "--limit":
                        let raw = try scanner.value(for: name, inline: inline)
                        guard let limit = Int(raw), (1...100).contains(limit) else {
                            throw OptionScanner.UsageError(description: "--limit '\(raw)' is not a number from 1 to 100")
                        }
                        parsed.limit = limit
                    case "--expires": parsed.expires = try expiry(try scanner.value(for: name, inline: inline))
                    case "--password": parsed.password = try password(try scanner.value(for: name, inline: inline))
                    default: throw scanner.unknown(name)
                    }
                }
            }
        } catch {
            printError(error.description)
            return .exit(2)
        }
        if help { print(usage); return .exit(0) }
        return .value(parsed)
    }

    /// What a file command needs before it asks: its options and the path, on a mount, that passed
    /// the command's own check (`refuse` returns a sentence for a path it does not take: exit 1).
    /// `defaultPath` stands in when none is given; without one a missing PATH is bad usage.
    static func prepare(_ arguments: [String], command: String, usage: String, accepts: Set<String>,
                        requiresRev: Bool = false, defaultPath: String? = nil,
                        refuse: (MountPath) -> String? = { _ in nil }) -> Step<(Arguments, MountPath)> {
        let options: Arguments
        switch parse(arguments, command: command, usage: usage, accepts: accepts) {
        case .exit(let status): return .exit(status)
        case .value(let parsed): options = parsed
        }
        guard let typed = options.paths.first ?? defaultPath else {
            printError("missing PATH (see dbxfs \(command) --help)")
            return .exit(2)
        }
        if requiresRev && options.rev == nil {
            printError("missing --rev REV: which revision (dbxfs history PATH lists them)")
            return .exit(2)
        }
        switch target(typed) {
        case .exit(let status): return .exit(status)
        case .value(let found):
            if let refusal = refuse(found) { printError(refusal); return .exit(1) }
            return .value((options, found))
        }
    }

    /// A file, not a folder: what history, cat and restore take.
    static func refuseFolder(_ target: MountPath) -> String? {
        target.isDirectory == true ? "\(target.shown) is a folder: only files have revisions" : nil
    }

    /// Asks the daemon and prints its answer: with `--json` the report (without the daemon's pid),
    /// else `text` of it. Returns the exit status.
    static func answer<T: FileCommandAnswer>(_ command: String, _ file: FileRequest, at target: MountPath, json: Bool,
                                             as type: T.Type, text: (T) -> String) -> Int32 {
        switch ask(command, file, at: target, as: T.self) {
        case .exit(let status): return status
        case .value(var report):
            report.pid = nil
            if json { printJSON(report) } else { print(text(report)) }
            return 0
        }
    }

    /// The mount `typed` is on (exit 3 when none; 1 when its socket is not to be trusted).
    static func target(_ typed: String) -> Step<MountPath> {
        do { return .value(try MountPath.resolve(typed)) } catch {
            printError(error.description)
            return .exit(error.notMounted ? 3 : 1)
        }
    }

    /// Asks the daemon of `target` to run `command`; its failure sentence goes to stderr.
    static func ask<T: Decodable & ControlAnswer>(_ command: String, _ file: FileRequest, at target: MountPath,
                                                  as type: T.Type) -> Step<T> {
        let request = ControlRequest(command: command, file: file)
        do { return .value(try ControlClient.request(request, socket: target.socket, timeout: 600, as: T.self)) } catch {
            printError(sentence(error, command: command, target: target))
            return .exit(error.notMounted ? 3 : 1)
        }
    }

    static func sentence(_ error: ControlClient.Failure, command: String, target: MountPath) -> String {
        guard let answer = error.answer else { return error.description }
        if answer.hasPrefix("unknown command") {
            return "the mount at \(target.mountpoint) runs an older dbxfs without '\(command)': unmount it and mount it again with this one"
        }
        return answer
    }

    /// Prints a report as `--json` does: pretty, sorted keys, without the daemon's pid.
    static func printJSON<T: Encodable>(_ value: T) {
        let data = (try? ReportCoding.encoder(pretty: true).encode(value)) ?? Data("{}".utf8)
        writeOutput(Array(data) + Array("\n".utf8))
    }

    /// "2026-12-01 10:00:05", UTC.
    static func time(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970.rounded(.down))
        var parts = tm()
        gmtime_r(&seconds, &parts)
        return String(format: "%04d-%02d-%02d %02d:%02d:%02d", parts.tm_year + 1900, parts.tm_mon + 1, parts.tm_mday,
                      parts.tm_hour, parts.tm_min, parts.tm_sec)
    }

    /// --expires: a duration from now (`30m`, `12h`, `7d`, `2w`), a date (`2026-12-31`, midnight
    /// UTC) or a time (`2026-12-31T18:00:00Z`). It must be in the future.
    static func expiry(_ raw: String, now: Date = Date()) throws(OptionScanner.UsageError) -> Date {
        let units: [Character: Double] = ["m": 60, "h": 3600, "d": 86400, "w": 7 * 86400]
        var date: Date?
        if let unit = raw.last, let seconds = units[unit], let count = Double(raw.dropLast()), count > 0 {
            date = now.addingTimeInterval(count * seconds)
        } else {
            let formatter = ISO8601DateFormatter()
            formatter.formatOptions = raw.contains("T") ? [.withInternetDateTime] : [.withFullDate]
            date = formatter.date(from: raw)
        }
        guard let date else {
            throw OptionScanner.UsageError(description: "--expires '\(raw)' is neither a duration (30m, 12h, 7d, 2w) nor a date (2026-12-31 or 2026-12-31T18:00:00Z)")
        }
        guard date > now else { throw OptionScanner.UsageError(description: "--expires '\(raw)' is in the past") }
        return date
    }

    /// --password: the value, or with `-` the first line of stdin (so it stays out of `ps`).
    static func password(_ raw: String) throws(OptionScanner.UsageError) -> String {
        var password = raw
        if raw == "-" { password = readLine(strippingNewline: true) ?? "" }
        guard !password.isEmpty else { throw OptionScanner.UsageError(description: "--password is empty") }
        return password
    }
}
