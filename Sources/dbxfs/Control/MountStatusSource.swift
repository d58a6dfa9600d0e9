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
    let phase = Mutex<Phase>(.starting)

    init(account: AccountReport, server: String, root: String, readOnly: Bool,
         cacheUsage: @escaping @Sendable () -> CacheUsage?, writeBack: WriteBackEngine?,
         offline: @escaping @Sendable () -> String? = { nil }, mountedAt: Date = Date()) {
        self.account = account; self.server = server; self.root = root; self.readOnly = readOnly
        self.offline = offline
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
        return MountStatusReport(mountpoint: mountpoint, pid: getpid(), mountedAt: mountedAt, account: account,
                                 server: server, root: root, readOnly: readOnly, state: state, offline: offline(), cache: cache,
                                 uploads: writeBack.map { Self.uploads($0.status()) })
    }

    /// Waits until everything closed before the call is committed, or until `deadline`.
    func sync(mountpoint: String, deadline: Date) -> SyncReport {
        let started = Date()
        guard let writeBack else {
            return SyncReport(mountpoint: mountpoint, ok: true, writeBack: false, waitedSeconds: 0, left: [], pid: getpid())
        }
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
                                         first: status.operations.prefix(10).map(pending)))
    }

    static func pending(_ upload: PendingUpload) -> PendingReport {
        PendingReport(path: upload.path, size: upload.size, state: upload.state.rawValue, attempts: upload.attempts,
                      openForWriting: upload.openForWriting, lastError: upload.lastError, operation: upload.operation)
    }
}
