/// `dbxfs pin [--json] [--wait] PATH...`, `dbxfs pin --list [--json] [PATH]` and `dbxfs unpin
/// [--json] PATH...`: files and folders on the mount kept available offline (docs/SEMANTICS.md,
/// "Available offline"). The daemon downloads them into its disk cache and keeps them there
/// (VFSCache/Pins/PinnedFiles.swift); these commands only ask it, over the control socket, like the
/// other file commands (FileCommand.swift).
import Foundation

enum PinCommand {
    static let usage = """
        usage: dbxfs pin [--json] [--wait] PATH...
               dbxfs pin --list [--json] [PATH]

        Keeps the files and folders at PATH (on a dbxfs mount; a folder with everything in it)
        available offline: the mount downloads them into its disk cache, checks each against
        Dropbox's content hash, and never evicts them. When a pinned file changes on Dropbox, or
        a file appears in a pinned folder, the new version is downloaded in the background. Pins
        last across remounts. A pin that does not fit in the disk cache (--cache-size) beside
        what is pinned already is refused, and nothing is pinned.

        options:
          --wait              return once every file under PATH is on disk (exit 1 if some
                              could not be downloaded); without it the download runs in the
                              background and dbxfs status shows its progress
          --list              list the pins of the mount PATH is on (default: the current
                              folder's), with how many of their files are available offline
          --json              print the machine-readable form (docs/STATUS.md, "Pins")
          -h, --help          this text

        exit status: 0 pinned (or listed), 1 failed (nothing at PATH, it does not fit in the disk
        cache, the mount keeps no disk cache; with --wait, a file could not be downloaded), 2 bad
        usage, 3 PATH is not on a dbxfs mount.
        """

    static let unpinUsage = """
        usage: dbxfs unpin [--json] PATH...

        Stops keeping the files and folders pinned at PATH (and pins inside them) available
        offline. Their bytes stay in the disk cache, first in line to be evicted when room is
        needed.

        options:
          --json              print the machine-readable form (docs/STATUS.md, "Pins")
          -h, --help          this text

        exit status: 0 unpinned, 1 failed (PATH is not pinned), 2 bad usage, 3 PATH is not on a
        dbxfs mount.
        """

    static let subcommand = Subcommand(name: "pin", summary: "keep files and folders available offline", run: run)
    static let unpinSubcommand = Subcommand(name: "unpin", summary: "stop keeping files and folders offline", run: runUnpin)

    static func run(_ arguments: [String]) -> Int32 {
        let options: FileCommand.Arguments
        switch FileCommand.parse(arguments, command: "pin", usage: usage, accepts: ["--json", "--list", "--wait"], maxPaths: .max) {
        case .exit(let status): return status
        case .value(let parsed): options = parsed
        }
        if options.list {
            guard options.paths.count <= 1, !options.wait else {
                printError("--list takes at most one PATH, to find the mount, and no --wait (see dbxfs pin --help)")
                return 2
            }
            return list(options.paths.first ?? ".", json: options.json)
        }
        return change("pin", options, usage: "pin") { report in
            if report.alreadyPinned {
                return "\(report.path) was pinned already: \(describe(report))."
            }
            return "Pinned \(report.path): \(describe(report))"
                + (options.wait ? "." : "; downloading in the background (dbxfs status shows the progress).")
        }
    }

    static func runUnpin(_ arguments: [String]) -> Int32 {
        switch FileCommand.parse(arguments, command: "unpin", usage: unpinUsage, accepts: ["--json"], maxPaths: .max) {
        case .exit(let status): return status
        case .value(let options):
            return change("unpin", options, usage: "unpin") { report in
                "Unpinned \(report.path): its \(describe(report)) stay cached until the room is needed."
            }
        }
    }

    private static func describe(_ report: PinReport) -> String {
        "\(counted(report.files, "file", "files")), \(StatusRenderer.bytes(Int64(clamping: report.bytes)))"
    }

    /// Pins or unpins each path (each on whatever mount it is on); the exit status is the worst.
    private static func change(_ command: String, _ options: FileCommand.Arguments, usage: String,
                               text: (PinReport) -> String) -> Int32 {
        guard !options.paths.isEmpty else {
            printError("missing PATH (see dbxfs \(usage) --help)")
            return 2
        }
        var status: Int32 = 0
        var done: [(target: MountPath, report: PinReport)] = []
        for typed in options.paths {
            guard case .value(let target) = stepStatus(FileCommand.target(typed), into: &status) else { continue }
            guard case .value(var report) = stepStatus(FileCommand.ask(command, FileRequest(path: target.relative), at: target,
                                                                       as: PinReport.self), into: &status) else { continue }
            report.pid = nil
            done.append((target, report))
            if !options.json { print(text(report)) }
        }
        if options.json {
            let reports = done.map(\.report)
            FileCommand.printJSON(command == "pin" ? PinResults(pinned: reports) : PinResults(unpinned: reports))
        }
        if options.wait {
            for (target, report) in done { status = max(status, waitFor(report.path, at: target)) }
        }
        return status
    }

    /// The step's value, or nil with the worst exit status so far kept in `status`.
    private static func stepStatus<T>(_ step: FileCommand.Step<T>, into status: inout Int32) -> FileCommand.Step<T> {
        if case .exit(let code) = step { status = max(status, code) }
        return step
    }

    /// Polls the mount until no file of the pin at `path` waits to be downloaded; names the files
    /// that failed (exit 1).
    private static func waitFor(_ path: String, at target: MountPath) -> Int32 {
        while true {
            guard case .value(let list) = FileCommand.ask("pins", FileRequest(path: target.relative), at: target,
                                                          as: PinListReport.self) else { return 1 }
            guard let pin = list.pins.first(where: { $0.path.lowercased() == path.lowercased() }) else {
                printError("\(path) is no longer pinned")
                return 1
            }
            if pin.counts.fetching == 0 {
                for failure in pin.failures { printError("\(failure.path) is not available offline: \(failure.message)") }
                return pin.counts.failed == 0 ? 0 : 1
            }
            Thread.sleep(forTimeInterval: 0.3)
        }
    }

    private static func list(_ typed: String, json: Bool) -> Int32 {
        let target: MountPath
        switch FileCommand.target(typed) {
        case .exit(let status): return status
        case .value(let found): target = found
        }
        switch FileCommand.ask("pins", FileRequest(path: target.relative), at: target, as: PinListReport.self) {
        case .exit(let status): return status
        case .value(var report):
            report.pid = nil
            if json { FileCommand.printJSON(report) } else { print(render(report)) }
            return 0
        }
    }

    static func render(_ report: PinListReport) -> String {
        guard !report.pins.isEmpty else { return "Nothing is pinned on the mount at \(report.mountpoint)." }
        var lines: [String] = []
        for pin in report.pins {
            let counts = pin.counts
            let size = StatusRenderer.bytes(Int64(clamping: counts.bytes))
            var state: String
            if !pin.exists {
                state = "nothing is there on Dropbox now (pinned again if something comes back)"
            } else if counts.fetching > 0 {
                state = "downloading, \(counts.current) of \(counts.files) available offline "
                    + "(\(StatusRenderer.bytes(Int64(clamping: counts.bytesFetched))) of \(size))"
            } else if counts.current == counts.files {
                state = "available offline"
            } else {
                state = "\(counts.current) of \(counts.files) available offline"
            }
            if counts.failed > 0 { state += ", \(counts.failed) failed" }
            lines.append("\(pin.path)  \(counted(counts.files, "file", "files")), \(size): \(state)")
            for failure in pin.failures { lines.append("    \(failure.path): \(failure.message)") }
        }
        lines.append("Pinned files take \(StatusRenderer.bytes(report.diskBytes)) of the disk cache's \(StatusRenderer.bytes(report.diskBudget)).")
        return lines.joined(separator: "\n")
    }
}
