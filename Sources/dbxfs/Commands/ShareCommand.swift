/// `dbxfs share [--json] [--expires WHEN] [--password PASSWORD|-] PATH`: prints a shared link to
/// a file or folder on the mount (sharing/create_shared_link_with_settings; the link it already
/// has is reused). The URL is the only line on stdout, so `url=$(dbxfs share f)` works.
import Foundation

enum ShareCommand {
    static let usage = """
        usage: dbxfs share [--json] [--expires WHEN] [--password PASSWORD|-] PATH

        Prints a shared link to the file or folder at PATH (on a dbxfs mount): anyone with the
        link can view it. Dropbox keeps one link per file or folder: when PATH has one already,
        that link is printed. The link is also the extended attribute user.dropbox.shared_link.

        options:
          --expires WHEN      the link stops working then: a duration (30m, 12h, 7d, 2w) or a
                              date (2026-12-31, midnight UTC; 2026-12-31T18:00:00Z)
          --password P        the link asks for this password; '-' reads it from the first line
                              of stdin (a password on the command line is visible in ps)
          --json              print the machine-readable form (docs/STATUS.md, "File commands")
          -h, --help          this text

        Expiry and password need a paid Dropbox account (Basic accounts cannot set them), and
        the app needs the sharing.write and sharing.read permissions.

        exit status: 0 printed, 1 failed (nothing at PATH on Dropbox, the account may not set
        those settings, PATH has a link with other settings, Dropbox cannot be reached), 2 bad
        usage, 3 PATH is not on a dbxfs mount.
        """

    static let subcommand = Subcommand(name: "share", summary: "print a shared link to a file or folder", run: run)

    static func run(_ arguments: [String]) -> Int32 {
        let options: FileCommand.Arguments
        switch FileCommand.parse(arguments, command: "share", usage: usage, accepts: ["--json", "--expires", "--password"]) {
        case .exit(let status): return status
        case .value(let parsed): options = parsed
        }
        guard let typed = options.paths.first else { printError("missing PATH (see dbxfs share --help)"); return 2 }
        let target: MountPath
        switch FileCommand.target(typed) {
        case .exit(let status): return status
        case .value(let found): target = found
        }
        var report: ShareReport
        let request = FileRequest(path: target.relative, expires: options.expires, password: options.password)
        switch FileCommand.ask("share", request, at: target, as: ShareReport.self) {
        case .exit(let status): return status
        case .value(let answer): report = answer
        }
        report.pid = nil
        if options.json { FileCommand.printJSON(report); return 0 }
        print(report.url)
        return 0
    }
}
