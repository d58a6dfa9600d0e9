/// `dbxfs undelete [--json] PATH`: brings back a deleted file on the mount at its last revision
/// (files/list_revisions for that revision, then files/restore); the mount shows it at once.
/// `dbxfs trash FOLDER` lists what can be brought back.
import Foundation

enum UndeleteCommand {
    static let usage = """
        usage: dbxfs undelete [--json] PATH

        Brings back the deleted file at PATH (on a dbxfs mount) at its last revision; the mount
        shows it at once (a deleted folder it was in comes back too). dbxfs trash FOLDER lists
        the deleted files Dropbox keeps.

        options:
          --json              print the machine-readable form (docs/STATUS.md, "File commands")
          -h, --help          this text

        exit status: 0 brought back, 1 failed (PATH exists, Dropbox has no deleted file there,
        a read-only mount, Dropbox cannot be reached), 2 bad usage, 3 PATH is not on a dbxfs
        mount.
        """

    static let subcommand = Subcommand(name: "undelete", summary: "bring back a deleted file", run: run)

    static func run(_ arguments: [String]) -> Int32 {
        switch FileCommand.prepare(arguments, command: "undelete", usage: usage, accepts: ["--json"]) {
        case .exit(let status): return status
        case .value(let (options, target)):
            return FileCommand.answer("undelete", FileRequest(path: target.relative), at: target, json: options.json,
                                      as: RestoreReport.self) { report in
                "Brought back \(report.path) at revision \(report.restoredRev) (\(report.size) bytes)."
            }
        }
    }
}
