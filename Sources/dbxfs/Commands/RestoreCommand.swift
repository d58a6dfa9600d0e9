/// `dbxfs restore --rev REV [--json] PATH`: makes an older revision of a file on the mount its
/// current version again (files/restore), as a new revision; the mount shows it at once. Refused
/// while the file has changes written on the mount that are not on Dropbox yet
/// (Control/FileCommandService+Restore.swift).
import Foundation

enum RestoreCommand {
    static let usage = """
        usage: dbxfs restore --rev REV [--json] PATH

        Makes revision REV of the file at PATH (on a dbxfs mount) its current version again, as a
        new revision on Dropbox; the mount shows it at once. REV is one of the revisions dbxfs
        history PATH lists. Refused while PATH has changes written on the mount that are not on
        Dropbox yet (dbxfs sync waits for them). A deleted file comes back with dbxfs undelete.

        options:
          --rev REV           the revision (required)
          --json              print the machine-readable form (docs/STATUS.md, "File commands")
          -h, --help          this text

        exit status: 0 restored (or REV was already current), 1 failed (no such revision, local
        changes pending, a read-only mount, Dropbox cannot be reached), 2 bad usage, 3 PATH is
        not on a dbxfs mount.
        """

    static let subcommand = Subcommand(name: "restore", summary: "make an older revision of a file current again", run: run)

    static func run(_ arguments: [String]) -> Int32 {
        switch FileCommand.prepare(arguments, command: "restore", usage: usage, accepts: ["--rev", "--json"], requiresRev: true,
                                   refuse: FileCommand.refuseFolder) {
        case .exit(let status): return status
        case .value(let (options, target)):
            return FileCommand.answer("restore", FileRequest(path: target.relative, rev: options.rev), at: target,
                                      json: options.json, as: RestoreReport.self) { report in
                report.unchanged ? "\(report.path) already has the content of revision \(report.restoredRev): nothing to restore."
                    : "Restored \(report.path) to revision \(report.restoredRev) (\(report.size) bytes); its current revision is now \(report.rev)."
            }
        }
    }
}
