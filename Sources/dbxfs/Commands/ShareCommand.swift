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
        switch FileCommand.prepare(arguments, command: "share", usage: usage, accepts: ["--json", "--expires", "--password"]) {
        case .exit(let status): return status
        case .value(let (options, target)):
            let request = FileRequest(path: target.relative, expires: options.expires, password: options.password)
            return FileCommand.answer("share", request, at: target, json: options.json, as: ShareReport.self) { $0.url }
        }
    }
}
