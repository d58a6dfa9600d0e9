/// What a running mount knows about itself for `dbxfs status` and `dbxfs sync`: who it is
/// (account, server, root), its cache, and its write-back engine. The mount backend builds one;
/// the control server turns it into reports.
///
/// `writeBack` is the `WriteBackEngine` the VFS uploads through. While a mount has none (a
/// read-only mount, or before the write side is wired in), status shows no uploads section and
/// sync answers at once that nothing can be pending.
import Foundation
import Synchronization
import VFSCache

final class MountStatusSource: Sendable {
    /// Where the daemon is in its life, for the report's `state`.
    enum Phase: Sendable {
        case starting
        /// Serving; the closure says whether the mount is still in the mount table.
        case serving(attached: @Sendable () -> Bool)
        /// The loop ended and the mount is gone; uploads drain before the process exits.
        case unmounted
    }

    let account: AccountReport
    let server: String
    let root: String
    let readOnly: Bool
    let mountedAt: Date
    private let cacheUsage: @Sendable () -> CacheUsage?
    let writeBack: WriteBackEngine?
    /// Why Dropbox is unreachable, or nil while online (the change watcher's view).
    private let offline: @Sendable () -> String?
    /// The link to Dropbox (ConnectionMonitor), given when the uploads are paused until.
    private let connection: @Sendable (_ uploadsPausedUntil: Date?) -> ConnectionReport?
    /// Run before a sync waits: picks up new credentials after a relink (ConnectionMonitor).
    private let beforeSync: @Sendable () -> Void
    /// The files kept offline (PinnedFiles), nil when nothing is pinned.
    private let pins: @Sendable () -> PinsStatusReport?
    let phase = Mutex<Phase>(.starting)
    /// (when, bytes uploaded so far) at each status request of the last minute: the upload rate.
    private let uploadSamples = Mutex<[(at: Date, bytes: UInt64)]>([])

    init(account: AccountReport, server: String, root: String, readOnly: Bool,
         cacheUsage: @escaping @Sendable () -> CacheUsage?, writeBack: WriteBackEngine?,
         offline: @escaping @Sendable () -> String? = { nil },
         connection: @escaping @Sendable (Date?) -> ConnectionReport? = { _ in nil },
         beforeSync: @escaping @Sendable () -> Void = {}, pins: @escaping @Sendable () -> PinsStatusReport? = { nil },
         mountedAt: Date = Date()) {
        self.account = account; self.server = server; self.root = root; self.readOnly = readOnly; self.pins = pins
        self.offline = offline; self.connection = connection; self.beforeSync = beforeSync
        self.cacheUsage = cacheUsage; self.writeBack = writeBack; self.mountedAt = mountedAt
    }

    /// For the in-memory test backend: no account, no cache, no uploads.
    static func memory(readOnly: Bool) -> MountStatusSource {
        MountStatusSource(account: AccountReport(email: "", displayName: "in-memory filesystem"), server: "memory",
                          root: "", readOnly: readOnly, cacheUsage: { nil }, writeBack: nil)
    }

    /// "starting", "mounted", "detached" or "unmounted" (docs/STATUS.md).
    var state: String {
        switch phase.withLock({ $0 }) {
        case .starting: return "starting"
        case .serving(let attached): return attached() ? "mounted" : "detached"
        case .unmounted: return "unmounted"
        }
    }

    func status(mountpoint: String) -> MountStatusReport {
        let usage = cacheUsage()
        let cache = CacheReport(diskBytes: usage?.diskBytes ?? 0, diskBudget: usage?.diskBudget ?? 0,
                                memoryBytes: usage?.memoryBytes ?? 0, memoryBudget: usage?.memoryBudget ?? 0,
                                entries: usage?.nodes ?? 0, openFiles: usage?.openFiles ?? 0)
        let uploadStatus = writeBack?.status()
        var uploads = uploadStatus.map(Self.uploads)
        if let writeBack, let report = uploads, report.pendingFiles > 0 {
            uploads?.bytesPerSecond = uploadRate(sent: writeBack.uploadedBytes, transfers: report.transfers)
            let inFlight = report.transfers.filter { !$0.writing }.reduce(UInt64(0)) { $0 + $1.bytesDone }
            let left = Double(report.pendingBytes > inFlight ? report.pendingBytes - inFlight : 0)
            if let rate = uploads?.bytesPerSecond, rate > 0 { uploads?.etaSeconds = left / rate }
        }
        return MountStatusReport(mountpoint: mountpoint, pid: getpid(), mountedAt: mountedAt, account: account,
                                 server: server, root: root, readOnly: readOnly, state: state, offline: offline(),
                                 connection: connection(uploadStatus?.pausedUntil), cache: cache, uploads: uploads,
                                 pins: pins())
    }

    /// Bytes per second Dropbox confirmed over the last half minute of status requests (so a
    /// `--watch` sees the current rate); on a first request, the transfers' own averages. nil
    /// while unknown.
    private func uploadRate(sent: UInt64, transfers: [TransferReport]) -> Double? {
        let now = Date()
        let earlier = uploadSamples.withLock { samples -> (at: Date, bytes: UInt64)? in
            samples.removeAll { now.timeIntervalSince($0.at) > 30 }
            let oldest = samples.first { now.timeIntervalSince($0.at) >= 1 }
            samples.append((now, sent))
            return oldest
        }
        if let earlier, sent >= earlier.bytes {
            return Double(sent - earlier.bytes) / now.timeIntervalSince(earlier.at)
        }
        let sum = transfers.filter { !$0.writing }.reduce(0) { $0 + $1.bytesPerSecond }
        return sum > 0 ? sum : nil
    }

    /// Waits until everything closed before the call is committed, or until `deadline`.
    func sync(mountpoint: String, deadline: Date) -> SyncReport {
        let started = Date()
        guard let writeBack else {
            return SyncReport(mountpoint: mountpoint, ok: true, writeBack: false, waitedSeconds: 0, left: [], pid: getpid())
        }
        beforeSync()
        let left = writeBack.waitForAll(deadline: deadline, retryingHeld: true)
        return SyncReport(mountpoint: mountpoint, ok: left.isEmpty, writeBack: true,
                          waitedSeconds: Date().timeIntervalSince(started), left: left.map(Self.pending), pid: getpid())
    }

    static func uploads(_ status: WriteBackStatus) -> UploadsReport {
        UploadsReport(
            pendingFiles: status.pendingFiles, pendingBytes: status.pendingBytes, offline: status.offline,
            transfers: status.transfers.map { transfer in
                let remaining = Double(transfer.bytesTotal &- min(transfer.bytesDone, transfer.bytesTotal))
                let eta: Double? = transfer.bytesPerSecond > 0 ? remaining / transfer.bytesPerSecond : nil
                return TransferReport(path: transfer.path, bytesDone: transfer.bytesDone, bytesTotal: transfer.bytesTotal,
                                      bytesPerSecond: transfer.bytesPerSecond, etaSeconds: transfer.writing ? nil : eta,
                                      startedAt: transfer.startedAt, writing: transfer.writing)
            },
            pending: status.uploads.map(pending),
            conflicts: status.conflicts.map { ConflictReport(path: $0.path, copyPath: $0.copyPath, at: $0.at) },
            errors: status.recentErrors.map { ErrorReport(path: $0.path, message: $0.message, at: $0.at) },
            operations: OperationsReport(pending: status.operations.count, oldestAt: status.operations.first?.queuedAt,
                                         lastError: status.operations.compactMap(\.lastError).last,
                                         first: status.operations.prefix(10).map(pending)),
            writesHeld: status.writesHeld > 0 ? status.writesHeld : nil)
    }

    static func pending(_ upload: PendingUpload) -> PendingReport {
        PendingReport(path: upload.path, size: upload.size, state: upload.state.rawValue, attempts: upload.attempts,
                      openForWriting: upload.openForWriting, lastError: upload.lastError, operation: upload.operation,
                      nextAttemptAt: upload.nextAttemptAt)
    }
}
