/// `dbxfs sync MOUNTPOINT [--timeout S]`: waits until everything written through the mount
/// before the call is committed to Dropbox. Exit 0 when it is; otherwise names each file that
/// is not, with its last error, and exits 1.
import Foundation
import VFSCache

enum SyncCommand {
    static let usage = """
        usage: dbxfs sync [--timeout S] MOUNTPOINT

        Waits until every file written through the dbxfs mount at MOUNTPOINT (or the mount that
        contains the path) before this call is committed to Dropbox.

        options:
          --timeout S         give up after S seconds (default: sync_timeout in the config file, else 3600)
          -q, --quiet         print nothing on success
          -h, --help          this text

        exit status: 0 everything committed, 1 some files are not committed (each is named, with
        its error) or the mount did not answer, 2 bad usage, 3 no dbxfs mount at MOUNTPOINT.
        """

    static let subcommand = Subcommand(name: "sync", summary: "wait until everything written is on Dropbox", run: run)

    static func run(_ arguments: [String]) -> Int32 {
        var timeout: Double?
        var mountpoint: String?
        var help = false, quiet = false
        var scanner = OptionScanner(arguments, command: "sync")
        let config: ConfigFile
        do {
            config = try ConfigFile.load()
            while let item = scanner.next() {
                switch item {
                case .positional(let value):
                    guard mountpoint == nil else { throw OptionScanner.UsageError(description: "too many arguments: \(value)") }
                    mountpoint = value
                case .option(let name, let inline):
                    switch name {
                    case "-h", "--help": help = true
                    case "-q", "--quiet": quiet = true
                    case "--timeout":
                        let raw = try scanner.value(for: name, inline: inline)
                        guard let seconds = Double(raw), seconds > 0 else { throw OptionScanner.UsageError(description: "invalid --timeout '\(raw)' (seconds)") }
                        timeout = seconds
                    default: throw scanner.unknown(name)
                    }
                }
            }
        } catch let error as OptionScanner.UsageError {
            printError(error.description); return 2
        } catch {
            printError("\(error)"); return 2
        }
        if help { print(usage); return 0 }
        guard let mountpoint else { printError("missing MOUNTPOINT (see dbxfs sync --help)"); return 2 }
        let seconds = timeout ?? config["sync_timeout"].flatMap(Double.init) ?? 3600

        let target: (mountpoint: String, socket: String)
        do { target = try ControlClient.socket(forPath: mountpoint) } catch {
            printError(error.description)
            return error.notMounted ? 3 : 1
        }
        let report: SyncReport
        do {
            // The mount stops waiting at the deadline; allow a little more for its answer.
            report = try ControlClient.request(ControlRequest(command: "sync", timeoutSeconds: seconds), socket: target.socket,
                                               timeout: seconds + 30, as: SyncReport.self)
        } catch {
            printError(error.description)
            return error.notMounted ? 3 : 1
        }
        if report.ok {
            if !quiet {
                print(report.writeBack ? "Everything written to \(target.mountpoint) is on Dropbox."
                      : "Nothing to sync: the mount at \(target.mountpoint) has no write-back.")
            }
            return 0
        }
        let timedOut = report.waitedSeconds >= seconds - 0.5
        let changes = report.left.filter { $0.operation != nil }.count, files = report.left.count - changes
        let changed = counted(changes, "change", "changes") + " (mkdir, unlink, rmdir, rename)"
        let what = changes == 0 ? "\(counted(files, "file", "files")) written to"
            : files == 0 ? "\(changed) made on" : "\(counted(files, "file", "files")) and \(changed) made on"
        printError("\(what) \(target.mountpoint) \(report.left.count == 1 ? "is" : "are") not on Dropbox yet\(timedOut ? " after \(Int(seconds)) s" : ""):")
        for item in report.left {
            let why = item.lastError ?? (item.openForWriting ? "still open for writing" : item.state)
            StandardError.write("  \(item.operation ?? item.path): \(why)\n")
        }
        return 1
    }
}
