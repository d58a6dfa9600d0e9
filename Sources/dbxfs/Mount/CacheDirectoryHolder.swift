/// Who holds a cache directory's lock (CacheDirectoryLock) and what it is doing, in the words of
/// a refusal: "dbxfs pid 1234, unmounted from /x, still uploading 1 file, 40.0 MiB left before it
/// exits". The holder's own control socket answers best (its state and uploads); when it does
/// not answer, the lock file's record says at least who it is and where it mounted.
import Foundation

enum CacheDirectoryHolder {
    struct Description {
        /// "dbxfs pid 1234, mounted at /x, ..."
        var who: String
        /// What the refused user can do about it (the refusal adds "or use another --cache-dir").
        var advice: String
    }

    static func describe(_ record: CacheDirectoryLock.Record?) -> Description {
        guard let record else {
            return Description(who: "another dbxfs process (it is starting)", advice: "wait a moment")
        }
        guard kill(record.pid, 0) == 0 || errno == EPERM else {
            // The holder took the lock but has not written its own record yet.
            return Description(who: "another dbxfs process (it is starting)", advice: "wait a moment")
        }
        let pid = "dbxfs pid \(record.pid)"
        var report = askStatus(record)
        // A plain `fusermount3 -u` passes through "detached" too: the kernel has dropped the mount
        // but the session has not read its end yet. Only a state that lasts is a lazy unmount.
        for _ in 0..<20 where report?.state == "detached" {
            usleep(100_000)
            report = askStatus(record)
        }
        guard let report, report.pid == record.pid else {
            // Its socket did not answer: what the lock file says is all there is.
            switch record.state {
            case "unmounted":
                return Description(who: "\(pid), unmounted from \(record.mountpoint) and finishing its uploads before it exits",
                                   advice: "wait for it (--wait-for-cache)")
            case "mounted":
                return Description(who: "\(pid), mounted at \(record.mountpoint)", advice: "unmount it first")
            default:
                return Description(who: "\(pid), which is starting a mount at \(record.mountpoint)", advice: "wait a moment")
            }
        }
        let uploads = uploadsLeft(report)
        switch report.state ?? "mounted" {
        case "unmounted":
            return Description(who: "\(pid), unmounted from \(record.mountpoint)"
                                    + (uploads.map { ", \($0) before it exits" } ?? " and about to exit"),
                               advice: "wait for it (--wait-for-cache)")
        case "detached":
            return Description(who: "\(pid), whose mount at \(record.mountpoint) was lazily unmounted but still serves files open there"
                                    + (uploads.map { " (\($0))" } ?? ""),
                               advice: "close them, or stop pid \(record.pid)")
        case "starting":
            return Description(who: "\(pid), which is starting a mount at \(record.mountpoint)", advice: "wait a moment")
        default:
            return Description(who: "\(pid), mounted at \(record.mountpoint)" + (uploads.map { ", \($0)" } ?? ""),
                               advice: "unmount it first")
        }
    }

    private static func askStatus(_ record: CacheDirectoryLock.Record) -> MountStatusReport? {
        record.socket.flatMap { socket in
            try? ControlClient.request(ControlRequest(command: "status"), socket: socket, timeout: 3, as: MountStatusReport.self)
        }
    }

    /// "still uploading 2 files, 40.0 MiB left", or nil when nothing is pending.
    private static func uploadsLeft(_ report: MountStatusReport) -> String? {
        guard let uploads = report.uploads, uploads.pendingFiles > 0 else { return nil }
        let sent = uploads.transfers.reduce(UInt64(0)) { $0 + min($1.bytesDone, $1.bytesTotal) }
        let left = uploads.pendingBytes > sent ? uploads.pendingBytes - sent : 0
        let files = uploads.pendingFiles == 1 ? "1 file" : "\(uploads.pendingFiles) files"
        return "still uploading \(files), \(StatusRenderer.bytes(Int64(clamping: left))) left"
            + (uploads.offline ? " (Dropbox is unreachable)" : "")
    }
}
