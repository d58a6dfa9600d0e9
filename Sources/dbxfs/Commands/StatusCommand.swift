/// `dbxfs status [--json] [--watch] [MOUNTPOINT]`: asks each live mount (or the one at
/// MOUNTPOINT) over its control socket what it is doing, and prints it (Control/StatusRenderer)
/// or its stable JSON (Control/StatusReport, docs/STATUS.md). `--watch` redraws every second
/// until interrupted.
import Foundation

enum StatusCommand {
    static let usage = """
        usage: dbxfs status [--all] [--json] [--watch] [--interval S] [MOUNTPOINT]
               dbxfs status --prometheus [MOUNTPOINT]

        Shows, for each running dbxfs mount (or the one at MOUNTPOINT): the account, the link to
        Dropbox (online, offline or refused, the last error, the next try), cache use against its
        budget, a summary of the pending uploads (counts, bytes, rate, ETA) with a progress bar
        for the largest transfers and the files that need attention, conflicts and recent errors.

        options:
          --all               list every pending file and transfer, not a summary
          --json              print the machine-readable form (documented in docs/STATUS.md)
          --watch             redraw every second until Ctrl-C (with --json: one JSON document per line)
          --interval S        the --watch period in seconds (default 1)
          --prometheus        print the mounts' metrics in the Prometheus text format (listed in
                              docs/STATUS.md), each series labelled with its mountpoint
          -h, --help          this text

        exit status: 0 shown, 1 a mount did not answer, 2 bad usage, 3 no dbxfs mount at MOUNTPOINT.
        """

    static let subcommand = Subcommand(name: "status", summary: "show mounts, cache use and upload progress", run: run)

    static func run(_ arguments: [String]) -> Int32 {
        var json = false, watch = false, help = false, all = false, prometheus = false
        var interval: Double = 1
        var mountpoint: String?
        var scanner = OptionScanner(arguments, command: "status")
        do throws(OptionScanner.UsageError) {
            while let item = scanner.next() {
                switch item {
                case .positional(let value):
                    guard mountpoint == nil else { throw OptionScanner.UsageError(description: "too many arguments: \(value) (one MOUNTPOINT at most)") }
                    mountpoint = value
                case .option(let name, let inline):
                    switch name {
                    case "-h", "--help": help = true
                    case "--json": try scanner.flagTakesNoValue(name, inline); json = true
                    case "--prometheus": try scanner.flagTakesNoValue(name, inline); prometheus = true
                    case "--all", "-a": try scanner.flagTakesNoValue(name, inline); all = true
                    case "--watch", "-w": try scanner.flagTakesNoValue(name, inline); watch = true
                    case "--interval":
                        let raw = try scanner.value(for: name, inline: inline)
                        guard let value = Double(raw), value >= 0.1 else { throw OptionScanner.UsageError(description: "invalid --interval '\(raw)'") }
                        interval = value
                    default: throw scanner.unknown(name)
                    }
                }
            }
        } catch {
            printError(error.description)
            return 2
        }
        if prometheus && (json || watch || all) {
            printError("--prometheus prints the metrics once: it does not go with --json, --watch or --all")
            return 2
        }
        if help { print(usage); return 0 }

        var target: (mountpoint: String, socket: String)?
        if let mountpoint {
            do { target = try ControlClient.socket(forPath: mountpoint) } catch {
                printError(error.description)
                return error.notMounted ? 3 : 1
            }
        }

        if prometheus { return printPrometheus(target: target) }

        let interactive = isatty(STDOUT_FILENO) == 1
        while true {
            let reports: [MountStatusReport]
            if let target {
                do {
                    reports = [try ControlClient.request(ControlRequest(command: "status"), socket: target.socket, timeout: 10,
                                                          as: MountStatusReport.self)]
                } catch {
                    printError(error.description)
                    return error.notMounted ? 3 : 1
                }
            } else {
                reports = ControlClient.allStatuses()
            }
            var output: String
            if json {
                output = ReportCoding.json(StatusDocument(mounts: reports), pretty: !watch) + "\n"
            } else {
                output = StatusRenderer.render(reports, width: interactive ? terminalWidth() : nil, all: all)
                if watch && interactive {
                    // Home, the report, then clear whatever the previous (longer) frame left below.
                    output = "\u{1B}[H" + output.replacingOccurrences(of: "\n", with: "\u{1B}[K\n") + "\u{1B}[J"
                }
            }
            writeOutput(output)
            guard watch else { return 0 }
            if !json && !interactive { writeOutput("\n") }
            Thread.sleep(forTimeInterval: interval)
        }
    }

    private static func terminalWidth() -> Int {
        var size = winsize()
        if ioctl(STDOUT_FILENO, UInt(TIOCGWINSZ), &size) == 0, size.ws_col > 20 { return Int(size.ws_col) }
        return 100
    }
}
