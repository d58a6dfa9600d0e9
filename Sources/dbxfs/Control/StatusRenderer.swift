/// The human form of `dbxfs status`: one block per mount with the account, the link to Dropbox
/// (online, offline or refused, the last error, the next attempt), the cache against its budget,
/// and a summary of the pending uploads (counts by state, bytes, rate, ETA), with a progress bar
/// for the few largest transfers in progress and a line for each file that needs attention; the
/// rest is counted, and `--all` lists every file. Paths are shown as seen from the mountpoint.
/// Plain text; `--watch` redraws it with ANSI codes.
import Foundation

enum StatusRenderer {
    /// How much a summary shows before "... and N more".
    static let shownTransfers = 5
    static let shownFiles = 5

    /// `width` is the terminal's (nil: not a terminal, nothing is cut); `all` lists every file.
    static func render(_ reports: [MountStatusReport], width: Int? = nil, all: Bool = false, now: Date = Date()) -> String {
        if reports.isEmpty { return "No dbxfs mounts are running.\n" }
        return reports.map { render($0, width: width, all: all, now: now) }.joined(separator: "\n")
    }

    static func render(_ report: MountStatusReport, width: Int? = nil, all: Bool = false, now: Date = Date()) -> String {
        var lines: [String] = []
        var who = report.account.email.isEmpty ? report.account.displayName : "\(report.account.displayName) <\(report.account.email)>"
        if let profile = report.account.profile { who += ", profile \(profile)" }
        let root = report.root.isEmpty ? "" : " folder \(report.root)"
        lines.append("\(report.mountpoint)  \(who)\(root) on \(report.server)\(report.readOnly ? " (read-only)" : "")")
        switch report.state {
        case "unmounted": lines.append(label("state") + "unmounted; pid \(report.pid) finishes its uploads, then exits")
        case "detached": lines.append(label("state") + "lazily unmounted; pid \(report.pid) still serves the files open there")
        default: break
        }
        lines += connection(report, width: width, now: now)
        let cache = report.cache
        var cacheLine = label("cache")
        cacheLine += cache.diskBudget > 0 ? "\(bytes(cache.diskBytes)) of \(bytes(cache.diskBudget)) on disk, " : "no disk cache, "
        cacheLine += "\(bytes(Int64(cache.memoryBytes))) of \(bytes(Int64(cache.memoryBudget))) in memory, "
        cacheLine += "\(counted(cache.entries, "entry", "entries")) cached"
        lines.append(cacheLine)
        if let pins = report.pins { lines += pinLines(pins) }

        guard let uploads = report.uploads else {
            lines.append(label("uploads") + "none (this mount has no write-back)")
            return lines.joined(separator: "\n") + "\n"
        }
        lines += uploadLines(uploads, width: width, all: all, now: now)
        lines += operationLines(uploads, all: all)
        if !uploads.conflicts.isEmpty {
            lines.append(label("conflicts") + "\(uploads.conflicts.count) (ours kept as a conflicted copy)")
            for conflict in uploads.conflicts.prefix(all ? Int.max : 5) {
                lines.append("    \(time(conflict.at))  \(relative(conflict.path)) -> \(relative(conflict.copyPath))")
            }
        }
        if !uploads.errors.isEmpty {
            lines.append(label("errors") + "the latest upload errors")
            for error in uploads.errors.suffix(all ? Int.max : 5) {
                lines.append("    \(time(error.at))  \(relative(error.path)): \(error.message)")
            }
        }
        return lines.joined(separator: "\n") + "\n"
    }

    // MARK: Sections

    private static func label(_ name: String) -> String { "  " + pad(name, 12) }

    /// The link to Dropbox: its state, since when, what to know, the last error, the next try.
    private static func connection(_ report: MountStatusReport, width: Int?, now: Date) -> [String] {
        guard let connection = report.connection else {
            // A daemon older than the `connection` field.
            return report.offline.map { [label("connection") + "offline: \($0)"] } ?? []
        }
        var head: String
        switch connection.state {
        case "offline": head = "offline" + (connection.since.map { " since \(time($0))" } ?? "")
        case "refused": head = "refused" + (connection.since.map { " since \(time($0))" } ?? "")
        default: head = connection.state
        }
        var text = head
        if let next = connection.nextRetryAt, let when = upcoming(next, now: now) { text += ", next try \(when)" }
        if let message = connection.message { text += ": \(message)" }
        if connection.state == "online", let error = connection.lastError {
            text += "; last error" + (connection.lastErrorAt.map { " at \(time($0))" } ?? "") + ": \(error)"
        }
        return wrap(text, first: label("connection"), indent: String(repeating: " ", count: 14), width: width)
    }

    /// Namespace changes journaled and not on Dropbox yet (docs/WRITEBACK.md, "Namespace
    /// operations"): how many, since when, the last error, and the oldest ones.
    private static func operationLines(_ uploads: UploadsReport, all: Bool) -> [String] {
        guard let operations = uploads.operations, operations.pending > 0 else { return [] }
        let oldest = operations.oldestAt.map { ", oldest \(time($0))" } ?? ""
        var lines = [label("changes") + "\(operations.pending) not on Dropbox yet (mkdir, unlink, rmdir, rename)\(oldest)"
                     + (operations.lastError.map { "; last error: \($0)" } ?? "")]
        for item in operations.first.prefix(all ? Int.max : 5) {
            lines.append("    \(item.operation ?? item.path)  \(item.state)")
        }
        return lines
    }

    private static func uploadLines(_ uploads: UploadsReport, width: Int?, all: Bool, now: Date) -> [String] {
        guard uploads.pendingFiles > 0 else { return [label("uploads") + "all committed"] }
        // A handful of files is shown whole; a summary is for many.
        let all = all || uploads.pendingFiles <= shownTransfers + shownFiles
        // What each transfer is doing: a file sent whole waits for its (batch) commit, a file with
        // nothing sent and no rate waits to be sent; only the rest is really in progress.
        // Offline, nothing is in progress: every request is being retried, so no transfer is shown
        // as a bar or as "sent"; each file is a line with its attempts and the next try.
        let transfers = uploads.offline ? uploads.transfers.filter(\.writing) : uploads.transfers
        let sent = transfers.filter { !$0.writing && $0.bytesTotal > 0 && $0.bytesDone >= $0.bytesTotal }
        let queued = transfers.filter { !$0.writing && $0.bytesDone == 0 && $0.bytesPerSecond == 0 }
        let sentOrQueued = Set((sent + queued).map(\.path))
        let moving = transfers.filter { !sentOrQueued.contains($0.path) }

        var parts: [String] = []
        let sending = moving.filter { !$0.writing }.count
        if sending > 0 { parts.append("\(sending) sending") }
        if !sent.isEmpty { parts.append("\(sent.count) sent, waiting for the commit") }
        let transferred = Set(transfers.map(\.path))
        let byState = Dictionary(grouping: uploads.pending.filter { !$0.openForWriting && !transferred.contains($0.path) }, by: \.state)
        let waiting = (byState["pending"]?.count ?? 0) + (byState["uploading"]?.count ?? 0) + queued.count
        if waiting > 0 { parts.append("\(waiting) waiting") }
        if let committing = byState["committing"]?.count { parts.append("\(committing) committing") }
        if let failed = byState["failed"]?.count { parts.append("\(failed) failed") }
        if let refused = byState["refused"]?.count { parts.append("\(refused) refused by Dropbox") }
        let open = uploads.pending.filter(\.openForWriting).count
        if open > 0 { parts.append("\(open) open for writing") }
        var summary = "\(counted(uploads.pendingFiles, "file", "files")) pending, \(bytes(Int64(clamping: uploads.pendingBytes)))"
        if !parts.isEmpty { summary += ": " + parts.joined(separator: ", ") }
        if let rate = uploads.bytesPerSecond, rate > 0 {
            summary += "; \(bytes(Int64(rate)))/s" + (uploads.etaSeconds.map { ", ETA \(duration($0))" } ?? "")
        }
        if uploads.offline { summary += "; Dropbox unreachable, retrying" }
        if let held = uploads.writesHeld, held > 0 {
            summary += "; \(counted(held, "write waits", "writes wait")) for them (more than the staging budget waits)"
        }
        var lines = [label("uploads") + summary]

        // Bars: the transfers in progress, the most bytes left first (with --all, every one, and
        // the files sent whole that wait for their commit). A transfer not started is a file line.
        let bars = all ? (moving + sent).sorted { $0.path < $1.path }
            : Array(moving.sorted { ($0.bytesTotal &- $0.bytesDone, $0.path) > ($1.bytesTotal &- $1.bytesDone, $1.path) }
                        .prefix(shownTransfers))
        let names = bars.map { relative($0.path).count + ($0.writing ? 10 : 0) }
        let nameWidth = max(8, min(names.max() ?? 0, width.map { $0 - 4 - 70 } ?? Int.max))
        for transfer in bars { lines.append("    " + progressLine(transfer, nameWidth: nameWidth)) }

        // Lines: files that need attention (an error, a refusal, open for writing), then others.
        let barred = Set(bars.map(\.path))
        let sentPaths = Set(sent.map(\.path))
        let rest = uploads.pending.filter { !barred.contains($0.path) && !sentPaths.contains($0.path) }
        let attention = rest.filter { $0.lastError != nil || $0.state == "failed" || $0.state == "refused" || $0.openForWriting }
        let ordered = attention + rest.filter { item in !attention.contains { $0.path == item.path } }.sorted { $0.size > $1.size }
        let shown = all ? ordered : Array(ordered.prefix(shownFiles))
        for item in shown { lines.append("    " + fileLine(item, now: now)) }
        let hidden = uploads.pendingFiles - bars.count - shown.count
        if hidden > 0 { lines.append("    ... and \(counted(hidden, "more file", "more files")) (dbxfs status --all lists every one)") }
        return lines
    }

    /// "notes/todo.txt  120 B  failed after attempt 3, next try in 0:52: the Dropbox account is full"
    static func fileLine(_ item: PendingReport, now: Date = Date()) -> String {
        var line = "\(relative(item.path))  \(bytes(Int64(clamping: item.size)))  "
        if item.openForWriting {
            line += "open for writing"
        } else {
            line += stateWords[item.state] ?? item.state
            if item.attempts > 0 { line += " after attempt \(item.attempts)" }
            if let next = item.nextAttemptAt, let when = upcoming(next, now: now) { line += ", next try \(when)" }
        }
        if let error = item.lastError { line += ": \(error)" }
        return line
    }

    private static let stateWords = ["pending": "waiting", "uploading": "sending", "committing": "committing",
                                     "failed": "failed", "refused": "refused by Dropbox"]

    /// "photos/a.jpg  [#########-----------]  45%   460.0 MiB / 1.0 GiB     52.3 MiB/s  ETA 0:11"
    static func progressLine(_ transfer: TransferReport, nameWidth: Int) -> String {
        var name = relative(transfer.path)
        let suffix = transfer.writing ? " (writing)" : ""
        if name.count + suffix.count > nameWidth { name = "…" + String(name.suffix(max(1, nameWidth - suffix.count - 1))) }
        name = pad(name + suffix, nameWidth)
        let done = bytes(Int64(clamping: transfer.bytesDone)), of = bytes(Int64(clamping: transfer.bytesTotal))
        if !transfer.writing, transfer.bytesTotal > 0, transfer.bytesDone >= transfer.bytesTotal {
            return name + "  sent whole (\(of)), waiting for the commit"
        }
        if !transfer.writing, transfer.bytesDone == 0, transfer.bytesPerSecond == 0 {
            return name + "  waiting to be sent (\(of))"
        }
        let total = max(transfer.bytesTotal, 1)
        let fraction = min(1, Double(transfer.bytesDone) / Double(total))
        let bar = bar(fraction)
        // Never 100% for a file not committed yet: the last bytes are its commit.
        let percent = String(format: "%3d%%", min(99, Int((fraction * 100).rounded(.down))))
        let rate = transfer.bytesPerSecond > 0 ? "\(bytes(Int64(transfer.bytesPerSecond)))/s" : "--/s"
        let eta = transfer.etaSeconds.map { "ETA \(duration(max($0, 1)))" } ?? "ETA --"
        return name + "  " + bar + " " + percent + "  " + padLeft(done, 10) + " / " + pad(of, 10)
            + "  " + padLeft(rate, 12) + "  " + eta
    }

    /// "[#########-----------]" for a fraction from 0 to 1.
    static func bar(_ fraction: Double) -> String {
        let barWidth = 20
        let filled = Int((min(max(fraction, 0), 1) * Double(barWidth)).rounded(.down))
        return "[" + String(repeating: "#", count: filled) + String(repeating: "-", count: barWidth - filled) + "]"
    }

    /// "pinned  12 files, 1.2 MiB in 2 pins: 10 available offline, 1 downloading, 1 failed", and
    /// a progress bar while pinned files download.
    static func pinLines(_ pins: PinsStatusReport) -> [String] {
        let counts = pins.counts
        var words = ["\(counts.current) available offline"]
        if counts.fetching > 0 { words.append("\(counts.fetching) downloading") }
        if counts.failed > 0 { words.append("\(counts.failed) failed (dbxfs pin --list says why)") }
        var lines = [label("pinned") + "\(counted(counts.files, "file", "files")), \(bytes(Int64(clamping: counts.bytes))) in "
                     + "\(counted(pins.paths, "pin", "pins")): " + words.joined(separator: ", ")]
        if counts.fetching > 0 {
            let fraction = Double(counts.bytesFetched) / Double(max(counts.bytes, 1))
            lines.append("    " + bar(fraction) + String(format: " %3d%%  ", Int((min(fraction, 1) * 100).rounded(.down)))
                         + bytes(Int64(clamping: counts.bytesFetched)) + " / " + bytes(Int64(clamping: counts.bytes)))
        }
        return lines
    }

    // MARK: Words

    /// A path inside the mount as seen from the mountpoint: "photos/a.jpg" (the root: ".").
    static func relative(_ path: String) -> String {
        let trimmed = path.drop { $0 == "/" }
        return trimmed.isEmpty ? "." : String(trimmed)
    }

    /// `text` after `first`, cut at spaces to `width` with `indent` on the next lines.
    private static func wrap(_ text: String, first: String, indent: String, width: Int?) -> [String] {
        guard let width, first.count + text.count > width, width > indent.count + 20 else { return [first + text] }
        var lines: [String] = []
        var current = first
        for word in text.split(separator: " ", omittingEmptySubsequences: false) {
            let start = current == first || current == indent
            if !start, current.count + 1 + word.count > width {
                lines.append(current)
                current = indent
            }
            current += (current == first || current == indent ? "" : " ") + word
        }
        lines.append(current)
        return lines
    }

    private static func pad(_ text: String, _ width: Int) -> String {
        text.count >= width ? text : text + String(repeating: " ", count: width - text.count)
    }

    private static func padLeft(_ text: String, _ width: Int) -> String {
        text.count >= width ? text : String(repeating: " ", count: width - text.count) + text
    }

    static func bytes(_ value: Int64) -> String {
        let units = ["B", "KiB", "MiB", "GiB", "TiB"]
        var size = Double(value)
        var unit = 0
        while size >= 1024 && unit < units.count - 1 { size /= 1024; unit += 1 }
        return unit == 0 ? "\(value) B" : String(format: "%.1f %@", size, units[unit])
    }

    static func duration(_ seconds: Double) -> String {
        guard seconds.isFinite, seconds < 360_000 else { return "--" }
        let s = Int(seconds.rounded(.up))
        return s >= 3600 ? String(format: "%d:%02d:%02d", s / 3600, s / 60 % 60, s % 60) : String(format: "%d:%02d", s / 60, s % 60)
    }

    /// "in 3 s", "in 1:05", or "at 21:04:05" when it is hours away; nil when it is past. The
    /// report's times are whole seconds (ISO 8601), so a time within the last second is "in 1 s".
    private static func upcoming(_ date: Date, now: Date) -> String? {
        guard date.addingTimeInterval(1) > now else { return nil }
        let seconds = date.timeIntervalSince(now)
        if seconds < 60 { return "in \(max(1, Int(seconds.rounded(.up)))) s" }
        if seconds < 3600 { return "in \(duration(seconds))" }
        return seconds < 86_400 ? "at \(time(date))" : "later"
    }

    /// "21:04:05", local time (also the connection monitor's messages).
    static func time(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970)
        var parts = tm()
        localtime_r(&seconds, &parts)
        return String(format: "%02d:%02d:%02d", parts.tm_hour, parts.tm_min, parts.tm_sec)
    }
}
