/// The human form of `dbxfs status`: one block per mount with the account, the cache against
/// its budget, pending uploads, a progress bar per active transfer (name, bytes of total, rate,
/// ETA), conflicts and recent errors. Plain text; `--watch` redraws it with ANSI codes.
import Foundation

enum StatusRenderer {
    static func render(_ reports: [MountStatusReport], width: Int = 100) -> String {
        if reports.isEmpty { return "No dbxfs mounts are running.\n" }
        return reports.map { render($0, width: width) }.joined(separator: "\n")
    }

    static func render(_ report: MountStatusReport, width: Int = 100) -> String {
        var lines: [String] = []
        var who = report.account.email.isEmpty ? report.account.displayName : "\(report.account.displayName) <\(report.account.email)>"
        if let profile = report.account.profile { who += ", profile \(profile)" }
        let root = report.root.isEmpty ? "" : " folder \(report.root)"
        lines.append("\(report.mountpoint)  \(who)\(root) on \(report.server)\(report.readOnly ? " (read-only)" : "")")
        switch report.state {
        case "unmounted": lines.append("  state     unmounted; pid \(report.pid) finishes its uploads, then exits")
        case "detached": lines.append("  state     lazily unmounted; pid \(report.pid) still serves the files open there")
        default: break
        }
        if let offline = report.offline {
            lines.append("  offline   \(offline); serving cached files, catching up when Dropbox answers")
        }
        let cache = report.cache
        var cacheLine = "  cache     "
        cacheLine += cache.diskBudget > 0 ? "\(bytes(cache.diskBytes)) of \(bytes(cache.diskBudget)) on disk, " : "no disk cache, "
        cacheLine += "\(bytes(Int64(cache.memoryBytes))) of \(bytes(Int64(cache.memoryBudget))) in memory, \(cache.entries) entries cached"
        lines.append(cacheLine)

        guard let uploads = report.uploads else {
            lines.append("  uploads   none (this mount has no write-back)")
            return lines.joined(separator: "\n") + "\n"
        }
        if uploads.pendingFiles == 0 {
            lines.append("  uploads   all committed")
        } else {
            lines.append("  uploads   \(uploads.pendingFiles) pending, \(bytes(Int64(clamping: uploads.pendingBytes)))\(uploads.offline ? " (Dropbox unreachable; will retry)" : "")")
        }
        if let operations = uploads.operations, operations.pending > 0 {
            let oldest = operations.oldestAt.map { ", oldest \(time($0))" } ?? ""
            lines.append("  changes   \(operations.pending) not on Dropbox yet (mkdir, unlink, rmdir, rename)\(oldest)"
                         + (operations.lastError.map { "; last error: \($0)" } ?? ""))
            for item in operations.first.prefix(5) { lines.append("    \(item.operation ?? item.path)  \(item.state)") }
        }
        // One name column for all bars, so the bars line up: as wide as the longest name, within
        // what the terminal leaves next to the figures (~70 columns).
        let longest = uploads.transfers.map { ($0.path as NSString).lastPathComponent.count + ($0.writing ? 10 : 0) }.max() ?? 0
        let nameWidth = max(8, min(longest, width - 4 - 72))
        for transfer in uploads.transfers {
            lines.append("    " + progressLine(transfer, nameWidth: nameWidth))
        }
        let activePaths = Set(uploads.transfers.map(\.path))
        let waiting = uploads.pending.filter { !activePaths.contains($0.path) }
        for item in waiting.prefix(10) {
            var line = "    \(item.path)  \(bytes(Int64(clamping: item.size)))  \(item.openForWriting ? "open for writing" : item.state)"
            if let error = item.lastError { line += " (\(error))" }
            lines.append(line)
        }
        if waiting.count > 10 { lines.append("    ... and \(waiting.count - 10) more") }
        if !uploads.conflicts.isEmpty {
            lines.append("  conflicts \(uploads.conflicts.count) (ours kept as a conflicted copy)")
            for conflict in uploads.conflicts.prefix(5) {
                lines.append("    \(time(conflict.at))  \(conflict.path) -> \(conflict.copyPath)")
            }
        }
        if !uploads.errors.isEmpty {
            lines.append("  errors")
            for error in uploads.errors.suffix(5) {
                lines.append("    \(time(error.at))  \(error.path): \(error.message)")
            }
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// "name  [#########---------------]  45%   460.0 MiB / 1.0 GiB      52.3 MiB/s  ETA 0:11"
    static func progressLine(_ transfer: TransferReport, nameWidth: Int) -> String {
        let total = max(transfer.bytesTotal, 1)
        let fraction = min(1, Double(transfer.bytesDone) / Double(total))
        let barWidth = 24
        let filled = Int((fraction * Double(barWidth)).rounded(.down))
        let bar = "[" + String(repeating: "#", count: filled) + String(repeating: "-", count: barWidth - filled) + "]"
        let percent = String(format: "%3d%%", Int((fraction * 100).rounded(.down)))
        let done = bytes(Int64(clamping: transfer.bytesDone)), of = bytes(Int64(clamping: transfer.bytesTotal))
        let rate = transfer.bytesPerSecond > 0 ? "\(bytes(Int64(transfer.bytesPerSecond)))/s" : "--/s"
        let eta = transfer.etaSeconds.map { "ETA \(duration($0))" } ?? "ETA --"
        var name = (transfer.path as NSString).lastPathComponent
        let suffix = transfer.writing ? " (writing)" : ""
        if name.count + suffix.count > nameWidth { name = String(name.prefix(max(1, nameWidth - suffix.count - 1))) + "…" }
        name += suffix
        return pad(name, nameWidth) + "  " + bar + " " + percent + "  " + padLeft(done, 10) + " / " + pad(of, 10)
            + "  " + padLeft(rate, 12) + "  " + eta
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

    private static func time(_ date: Date) -> String {
        var seconds = time_t(date.timeIntervalSince1970)
        var parts = tm()
        localtime_r(&seconds, &parts)
        return String(format: "%02d:%02d:%02d", parts.tm_hour, parts.tm_min, parts.tm_sec)
    }
}
