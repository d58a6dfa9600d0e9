/// Offline mode: whether Dropbox is reachable, as the change watcher last found out, and a
/// `RemoteStore` wrapper that fails at once while it is not.
///
/// Why a gate: the remote adapter retries a dead network for several seconds per call. Offline,
/// a read of an uncached block, a listing of an unlisted folder or a metadata call would each
/// wait out that budget. Behind the gate they fail immediately with `.unavailable` (EIO for the
/// reader; the write-back engine keeps its journal and retries), and the cached tree and cached
/// blocks are served as usual. The watcher talks to the ungated remote, so it notices when the
/// network returns and clears the flag.
///
/// The watcher backs off up to several seconds between probes, so the gate also lets one call
/// through per `probeInterval` while offline: a user who retries a read once the network is back
/// gets it at once, and that success ends offline mode for everyone.
import Foundation
import Synchronization

public final class OfflineState: Sendable {
    private let flag = Atomic<Bool>(false)
    private let details = Mutex(Details())

    /// For `dbxfs status`: why, since when, and when the watcher tries again.
    private struct Details {
        var reason: String?
        var since: Date?
        var nextProbe: Date?
    }

    public init(offline: Bool = false, reason: String? = nil) {
        flag.store(offline, ordering: .relaxed)
        details.withLock { $0 = Details(reason: reason, since: offline ? Date() : nil) }
    }

    public var isOffline: Bool { flag.load(ordering: .relaxed) }
    /// A sentence (the error that made the mount go offline).
    public var reason: String? { details.withLock { $0.reason } }
    public var since: Date? { details.withLock { $0.since } }
    /// When the change watcher probes Dropbox next (nil: not known).
    public var nextProbe: Date? { details.withLock { $0.nextProbe } }

    /// Says a change of state (the change watcher's log lines): set once, by the watcher.
    public typealias Announcer = @Sendable (_ offline: Bool, _ reason: String?) -> Void
    private let announcer = Mutex<Announcer?>(nil)

    public func announceChanges(with announce: @escaping Announcer) {
        announcer.withLock { $0 = announce }
    }

    /// Returns true if this changed the state. A change is announced before the flag flips, so
    /// whoever reads `isOffline` (`dbxfs status`) sees the new state only once the log has said
    /// it, whichever setter made it (the watcher, or a gated call that got through). Setters are
    /// serialised by `details`'s lock, so two cannot both announce one change. Lock order:
    /// `details`, then `announcer` (released before the call), then the announcer's own (the
    /// logger's).
    @discardableResult
    public func set(offline: Bool, reason: String? = nil) -> Bool {
        details.withLock { details in
            let changed = flag.load(ordering: .relaxed) != offline
            if changed {
                announcer.withLock { $0 }?(offline, reason)
                flag.store(offline, ordering: .relaxed)
            }
            details.reason = offline ? reason : nil
            if changed || !offline { details.since = offline ? Date() : nil }
            if !offline { details.nextProbe = nil }
            return changed
        }
    }

    /// The watcher's next attempt to reach Dropbox.
    public func noteNextProbe(at date: Date) {
        details.withLock { $0.nextProbe = date }
    }
}

/// Forwards to `base`, except while `state` says offline: then calls throw `.unavailable` at
/// once, but for one probe call per `probeInterval`, which goes through and, if it reaches
/// Dropbox, ends offline mode.
public final class OfflineGatedRemote: RemoteStore, Sendable {
    public let base: any RemoteStore
    public let state: OfflineState
    /// nil: no probes, every call fails at once while offline (the mount's choice: its watcher
    /// probes on a fail-fast client, so no user call pays the retry budget against a dead network).
    private let probeInterval: Duration?
    private let lastProbe = Mutex<ContinuousClock.Instant?>(nil)

    public init(_ base: any RemoteStore, state: OfflineState, probeInterval: Duration? = .seconds(1)) {
        self.base = base; self.state = state; self.probeInterval = probeInterval
    }

    private func check() throws(RemoteError) {
        guard state.isOffline else { return }
        let now = ContinuousClock.now
        let mayProbe = lastProbe.withLock { last in
            guard let probeInterval else { return false }
            if let last, now - last < probeInterval { return false }
            last = now
            return true
        }
        if !mayProbe { throw .unavailable("the mount is offline: \(state.reason ?? "Dropbox cannot be reached")") }
    }

    /// Runs one forwarded call; a call that got an answer from Dropbox (even a refusal) proves
    /// the network is back.
    private func pass<T>(_ call: () throws(RemoteError) -> T) throws(RemoteError) -> T {
        try check()
        do throws(RemoteError) {
            let result = try call()
            if state.isOffline { state.set(offline: false) }
            return result
        } catch {
            switch error {
            case .unavailable, .cancelled: break
            default: if state.isOffline { state.set(offline: false) }
            }
            throw error
        }
    }

    public func metadata(path: String) throws(RemoteError) -> RemoteEntry? { try pass { () throws(RemoteError) in try base.metadata(path: path) } }
    public func listFolder(path: String, recursive: Bool, limit: Int?) throws(RemoteError) -> RemoteListPage {
        try pass { () throws(RemoteError) in try base.listFolder(path: path, recursive: recursive, limit: limit) }
    }
    public func listFolderContinue(cursor: String) throws(RemoteError) -> RemoteListPage {
        try pass { () throws(RemoteError) in try base.listFolderContinue(cursor: cursor) }
    }
    public func latestCursor(path: String, recursive: Bool) throws(RemoteError) -> String {
        try pass { () throws(RemoteError) in try base.latestCursor(path: path, recursive: recursive) }
    }
    public func longpoll(cursor: String, timeout: Int) throws(RemoteError) -> (changes: Bool, backoff: Int?) {
        try pass { () throws(RemoteError) in try base.longpoll(cursor: cursor, timeout: timeout) }
    }
    public func download(path: String, rev: String?, range: Range<UInt64>?, sink: (UnsafeRawBufferPointer) -> Bool) throws(RemoteError) {
        try pass { () throws(RemoteError) in try base.download(path: path, rev: rev, range: range, sink: sink) }
    }
    public func upload(file: URL, length: UInt64, commit: RemoteCommit, progress: RemoteProgress?) throws(RemoteError) -> RemoteEntry {
        try pass { () throws(RemoteError) in try base.upload(file: file, length: length, commit: commit, progress: progress) }
    }
    public func startSession(concurrent: Bool) throws(RemoteError) -> String { try pass { () throws(RemoteError) in try base.startSession(concurrent: concurrent) } }
    public func appendSession(id: String, file: URL, offset: UInt64, length: UInt64, close: Bool, progress: RemoteProgress?) throws(RemoteError) {
        try pass { () throws(RemoteError) in try base.appendSession(id: id, file: file, offset: offset, length: length, close: close, progress: progress) }
    }
    public func appendSessionChecked(id: String, bytes: Data, offset: UInt64, contentHash: String) throws(RemoteError) {
        try pass { () throws(RemoteError) in try base.appendSessionChecked(id: id, bytes: bytes, offset: offset, contentHash: contentHash) }
    }
    public func uploadClosedSession(file: URL, length: UInt64, progress: RemoteProgress?) throws(RemoteError) -> String {
        try pass { () throws(RemoteError) in try base.uploadClosedSession(file: file, length: length, progress: progress) }
    }
    public func finishBatch(_ entries: [(session: RemoteUploadedSession, commit: RemoteCommit)]) throws(RemoteError) -> [Result<RemoteEntry, RemoteError>] {
        try pass { () throws(RemoteError) in try base.finishBatch(entries) }
    }
    public func createFolder(path: String) throws(RemoteError) -> RemoteEntry { try pass { () throws(RemoteError) in try base.createFolder(path: path) } }
    public func delete(path: String) throws(RemoteError) { try pass { () throws(RemoteError) in try base.delete(path: path) } }
    public func move(from: String, to: String) throws(RemoteError) -> RemoteEntry { try pass { () throws(RemoteError) in try base.move(from: from, to: to) } }
    public func copy(from: String, to: String) throws(RemoteError) -> RemoteEntry { try pass { () throws(RemoteError) in try base.copy(from: from, to: to) } }
    public func createFolders(_ paths: [String]) throws(RemoteError) -> [Result<RemoteEntry, RemoteError>] {
        try pass { () throws(RemoteError) in try base.createFolders(paths) }
    }
    public func deleteBatch(_ entries: [RemoteDelete]) throws(RemoteError) -> [RemoteError?] {
        try pass { () throws(RemoteError) in try base.deleteBatch(entries) }
    }
    public func moveBatch(_ entries: [RemoteMove]) throws(RemoteError) -> [Result<RemoteEntry, RemoteError>] {
        try pass { () throws(RemoteError) in try base.moveBatch(entries) }
    }
    public func spaceUsage() throws(RemoteError) -> (used: UInt64, allocated: UInt64) { try pass { () throws(RemoteError) in try base.spaceUsage() } }
    public func export(path: String) throws(RemoteError) -> ExportedFile { try pass { () throws(RemoteError) in try base.export(path: path) } }
    public func sharedLink(path: String) throws(RemoteError) -> String? { try pass { () throws(RemoteError) in try base.sharedLink(path: path) } }
}
