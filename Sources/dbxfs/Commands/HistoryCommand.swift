/// `dbxfs history [--json] [--limit N] PATH`: the revisions Dropbox keeps of a file on the mount
/// (files/list_revisions, at that path), newest first, with when each was saved, its size and
/// content hash; for a deleted file, when it was deleted. `cat --rev` and `restore --rev` take
/// the revisions it prints.
import Foundation

enum HistoryCommand {
    static let usage = """
        usage: dbxfs history [--json] [--limit N] PATH

        Lists the revisions Dropbox keeps of the file at PATH (on a dbxfs mount), newest first:
        the revision, its size, when Dropbox saved it (UTC), and its content hash. PATH may be a
        deleted file. Dropbox keeps the revisions made at that path (a renamed file's older
        names are not followed).

        options:
          --json              print the machine-readable form (docs/STATUS.md, "File commands")
          --limit N           at most N revisions (1 to 100, default 100)
          -h, --help          this text

        exit status: 0 listed, 1 failed (PATH is a folder, Dropbox has no such file, Dropbox
        cannot be reached), 2 bad usage, 3 PATH is not on a dbxfs mount.
        """

    static let subcommand = Subcommand(name: "history", summary: "list the revisions Dropbox keeps of a file", run: run)

    static func run(_ arguments: [String]) -> Int32 {
        switch FileCommand.prepare(arguments, command: "history", usage: usage, accepts: ["--json", "--limit"],
                                   refuse: FileCommand.refuseFolder) {
        case .exit(let status): return status
        case .value(let (options, target)):
            return FileCommand.answer("history", FileRequest(path: target.relative, limit: options.limit), at: target,
                                      json: options.json, as: HistoryReport.self, text: render)
        }
    }

    static func render(_ report: HistoryReport) -> String {
        var lines: [String] = []
        if report.deleted {
            lines.append("\(report.path) (deleted\(report.deletedAt.map { " " + FileCommand.time($0) + " UTC" } ?? ""))")
        } else {
            lines.append(report.path)
        }
        let sizeWidth = max(4, report.revisions.map { String($0.size).count }.max() ?? 0)
        lines.append("REV           " + "SIZE".padding(toLength: sizeWidth, withPad: " ", startingAt: 0)
                     + "  SAVED (UTC)          CONTENT HASH")
        for revision in report.revisions {
            let size = String(repeating: " ", count: sizeWidth - String(revision.size).count) + String(revision.size)
            lines.append(revision.rev.padding(toLength: max(12, revision.rev.count), withPad: " ", startingAt: 0) + "  " + size
                         + "  " + FileCommand.time(revision.serverModified) + "  " + (revision.contentHash ?? "-")
                         + (revision.current ? "  (current)" : ""))
        }
        if report.hasMore { lines.append("(Dropbox keeps older revisions too: --limit shows up to 100)") }
        return lines.joined(separator: "\n")
    }
}
