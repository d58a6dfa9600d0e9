/// `dbxfs trash [--json] [FOLDER]`: the deleted files Dropbox keeps in a folder on the mount and
/// below it (files/list_folder with include_deleted, and each file's last revision), with when
/// each was deleted; `dbxfs undelete` takes the paths it prints.
import Foundation

enum TrashCommand {
    static let usage = """
        usage: dbxfs trash [--json] [FOLDER]

        Lists the deleted files Dropbox keeps in FOLDER (on a dbxfs mount; default: the current
        folder) and in the folders below it: when each was deleted (UTC), the size of its last
        revision, and its path, which dbxfs undelete takes. It lists the whole folder tree on
        Dropbox and asks for each deleted file's last revision, so a large tree takes a while.

        options:
          --json              print the machine-readable form (docs/STATUS.md, "File commands")
          -h, --help          this text

        exit status: 0 listed (also when nothing was deleted), 1 failed (FOLDER is a file,
        Dropbox cannot be reached), 2 bad usage, 3 FOLDER is not on a dbxfs mount.
        """

    static let subcommand = Subcommand(name: "trash", summary: "list the deleted files of a folder", run: run)

    static func run(_ arguments: [String]) -> Int32 {
        let refuseFile = { (target: MountPath) -> String? in
            target.isDirectory == false
                ? "\(target.shown) is a file: trash lists what was deleted in a folder (dbxfs history lists the revisions of a file)"
                : nil
        }
        switch FileCommand.prepare(arguments, command: "trash", usage: usage, accepts: ["--json"], defaultPath: ".", refuse: refuseFile) {
        case .exit(let status): return status
        case .value(let (options, target)):
            return FileCommand.answer("trash", FileRequest(path: target.relative), at: target, json: options.json,
                                      as: TrashReport.self, text: render)
        }
    }

    static func render(_ report: TrashReport) -> String {
        guard !report.deleted.isEmpty else { return "Dropbox keeps no deleted files in \(report.folder)." }
        let sizeWidth = max(4, report.deleted.map { String($0.size).count }.max() ?? 0)
        var lines = ["DELETED (UTC)        " + String(repeating: " ", count: sizeWidth - 4) + "SIZE  PATH"]
        for file in report.deleted {
            let when = file.deletedAt.map(FileCommand.time) ?? "?".padding(toLength: 19, withPad: " ", startingAt: 0)
            let size = String(repeating: " ", count: sizeWidth - String(file.size).count) + String(file.size)
            lines.append(when + "  " + size + "  " + file.path)
        }
        return lines.joined(separator: "\n")
    }
}
