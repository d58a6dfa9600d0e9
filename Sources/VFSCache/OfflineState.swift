/// Offline mode: whether Dropbox is reachable, as the change watcher last found out, and a
/// `RemoteStore` wrapper that fails at once while it is not.
///
/// Why a gate: the remote adapter retries a dead network for several seconds per call. Offline,
/// a read of an uncached block, a listing of an unlisted folder or a metadata call would each
/// wait out that budget. Behind the gate they fail immediately with `.unavailable` (EIO for the
/// reader; the write-back engine keeps its journal and retries), and the cached tree and cached
/// blocks are served as usual. The watcher talks to the ungated remote, so it notices when the
/// network returns and clears the flag.
import Foundation
import Synchronization

public final class OfflineState: Sendable {
    private let flag = Atomic<Bool>(false)
    private let why = Mutex<String?>(nil)

    public init(offline: Bool = false, reason: String? = nil) {
        flag.store(offline, ordering: .relaxed)
        why.withLock { $0 = reason }
    }

    public var isOffline: Bool { flag.load(ordering: .relaxed) }
    public var reason: String? { why.withLock { $0 } }

    /// Returns true if this changed the state.
    @discardableResult
    public func set(offline: Bool, reason: String? = nil) -> Bool {
        why.withLock { $0 = offline ? reason : nil }
        return flag.exchange(offline, ordering: .relaxed) != offline
    }
}

/// Forwards to `base`, except while `state` says offline: then every call throws `.unavailable`.
public struct OfflineGatedRemote: RemoteStore {
    public let base: any RemoteStore
    public let state: OfflineState

    public init(_ base: any RemoteStore, state: OfflineState) { self.base = base; self.state = state }

    private func check() throws(RemoteError) {
        if state.isOffline { throw .unavailable("offline: \(state.reason ?? "Dropbox cannot be reached")") }
    }

    public func metadata(path: String) throws(RemoteError) -> RemoteEntry? { try check(); return try base.metadata(path: path) }
    public func listFolder(path: String, recursive: Bool, limit: Int?) throws(RemoteError) -> RemoteListPage {
        try check(); return try base.listFolder(path: path, recursive: recursive, limit: limit)
    }
    public func listFolderContinue(cursor: String) throws(RemoteError) -> RemoteListPage {
        try check(); return try base.listFolderContinue(cursor: cursor)
    }
    public func latestCursor(path: String, recursive: Bool) throws(RemoteError) -> String {
        try check(); return try base.latestCursor(path: path, recursive: recursive)
    }
    public func longpoll(cursor: String, timeout: Int) throws(RemoteError) -> (changes: Bool, backoff: Int?) {
        try check(); return try base.longpoll(cursor: cursor, timeout: timeout)
    }
    public func download(path: String, rev: String?, range: Range<UInt64>?, sink: (UnsafeRawBufferPointer) -> Bool) throws(RemoteError) {
        try check(); try base.download(path: path, rev: rev, range: range, sink: sink)
    }
    public func upload(file: URL, length: UInt64, commit: RemoteCommit, progress: RemoteProgress?) throws(RemoteError) -> RemoteEntry {
        try check(); return try base.upload(file: file, length: length, commit: commit, progress: progress)
    }
    public func startSession(concurrent: Bool) throws(RemoteError) -> String { try check(); return try base.startSession(concurrent: concurrent) }
    public func appendSession(id: String, file: URL, offset: UInt64, length: UInt64, close: Bool, progress: RemoteProgress?) throws(RemoteError) {
        try check(); try base.appendSession(id: id, file: file, offset: offset, length: length, close: close, progress: progress)
    }
    public func finishBatch(_ entries: [(session: RemoteUploadedSession, commit: RemoteCommit)]) throws(RemoteError) -> [Result<RemoteEntry, RemoteError>] {
        try check(); return try base.finishBatch(entries)
    }
    public func createFolder(path: String) throws(RemoteError) -> RemoteEntry { try check(); return try base.createFolder(path: path) }
    public func delete(path: String) throws(RemoteError) { try check(); try base.delete(path: path) }
    public func move(from: String, to: String) throws(RemoteError) -> RemoteEntry { try check(); return try base.move(from: from, to: to) }
    public func copy(from: String, to: String) throws(RemoteError) -> RemoteEntry { try check(); return try base.copy(from: from, to: to) }
    public func spaceUsage() throws(RemoteError) -> (used: UInt64, allocated: UInt64) { try check(); return try base.spaceUsage() }
}
