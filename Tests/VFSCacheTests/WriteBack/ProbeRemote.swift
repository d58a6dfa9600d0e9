/// A `RemoteStore` wrapper for write-back tests: it can hold an operation at a gate (to catch an
/// upload in flight, then cancel it or "crash" the engine), delay appends (to observe how many run
/// in parallel), fail a call after it reached the inner remote (a lost response), fail calls
/// before they reach it, and it logs every commit that landed.
import ContentHash
import Foundation
@testable import VFSCache

final class ProbeRemote: RemoteStore, @unchecked Sendable {
    // @unchecked: every var is only touched with `lock` held.
    let inner: any RemoteStore
    private let lock = NSCondition()
    private var closedGates: Set<String> = []
    private var waiting: [String: Int] = [:]
    private var inFlightAppends = 0
    private var maxInFlight = 0
    private var landed: [(path: String, hash: String?)] = []
    private var before: @Sendable (String, String) -> RemoteError? = { _, _ in nil }
    private var after: @Sendable (String, String) -> RemoteError? = { _, _ in nil }
    private var appendDelay: TimeInterval = 0
    private var bogusHash = false
    private var replays = 0
    /// Kill-point simulation: after this many call boundaries (entering or leaving an upload-family
    /// call), every call blocks at that boundary until `thaw`.
    private var freezeAfter: Int?
    private var boundaries = 0
    private var frozen = false
    /// After `kill`: calls stuck at a frozen boundary fail, as a dead process's would.
    private var killed = false

    init(_ inner: any RemoteStore) { self.inner = inner }

    // MARK: Controls

    /// Calls of `operation` block until `openGate`.
    func closeGate(_ operation: String) { lock.lock(); closedGates.insert(operation); lock.unlock() }
    func openGate(_ operation: String) { lock.lock(); closedGates.remove(operation); lock.broadcast(); lock.unlock() }
    /// Waits until `count` calls of `operation` are blocked at its gate.
    func waitUntilBlocked(_ operation: String, count: Int = 1, timeout: TimeInterval = 10) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        lock.lock(); defer { lock.unlock() }
        while (waiting[operation] ?? 0) < count { if !lock.wait(until: deadline) { return false } }
        return true
    }
    /// Fails a call (operation, path or session id) before it reaches the inner remote.
    func failBefore(_ rule: @escaping @Sendable (String, String) -> RemoteError?) { lock.lock(); before = rule; lock.unlock() }
    /// Fails a call after the inner remote executed it: the reply is "lost".
    func failAfter(_ rule: @escaping @Sendable (String, String) -> RemoteError?) { lock.lock(); after = rule; lock.unlock() }
    func setAppendDelay(_ seconds: TimeInterval) { lock.lock(); appendDelay = seconds; lock.unlock() }
    /// Replies to commits with a wrong content hash (a corrupted commit).
    func setBogusHash(_ on: Bool) { lock.lock(); bogusHash = on; lock.unlock() }

    /// Freezes the remote after `boundaries` call boundaries: a call frozen on entry never reached
    /// Dropbox; one frozen on leaving did, but its reply is never seen (the process "died").
    func freeze(afterBoundaries count: Int) { lock.lock(); freezeAfter = count; boundaries = 0; frozen = false; lock.unlock() }
    var boundariesPassed: Int { lock.lock(); defer { lock.unlock() }; return boundaries }
    var isFrozen: Bool { lock.lock(); defer { lock.unlock() }; return frozen }
    func thaw() { lock.lock(); freezeAfter = nil; frozen = false; lock.broadcast(); lock.unlock() }
    /// Freezes now; every call stuck or arriving later fails: nothing more reaches Dropbox.
    func freezeNow() { lock.lock(); freezeAfter = 0; frozen = true; lock.unlock() }
    func kill() { lock.lock(); killed = true; frozen = false; lock.broadcast(); lock.unlock() }

    private func boundary() throws(RemoteError) {
        lock.lock(); defer { lock.unlock() }
        if killed { throw .unavailable("test: the process is dead") }
        guard let limit = freezeAfter else { return }
        boundaries += 1
        if boundaries > limit { frozen = true; lock.broadcast() }
        while frozen { lock.wait() }
        if killed { throw .unavailable("test: the process is dead") }
    }

    var maxConcurrentAppends: Int { lock.lock(); defer { lock.unlock() }; return maxInFlight }
    /// Paths (lowercased) of every commit that landed, in order.
    var landedCommits: [String] { lock.lock(); defer { lock.unlock() }; return landed.map(\.path) }

    // MARK: Plumbing

    private func enter(_ operation: String, _ key: String, countsAsBoundary: Bool = true) throws(RemoteError) {
        if operation != "metadata" && countsAsBoundary { try boundary() }
        lock.lock()
        while closedGates.contains(operation) {
            waiting[operation, default: 0] += 1
            lock.broadcast()
            lock.wait()
            waiting[operation, default: 0] -= 1
        }
        let rule = before
        lock.unlock()
        if let error = rule(operation, key) { throw error }
    }

    private func leave(_ operation: String, _ key: String) throws(RemoteError) {
        try boundary()
        lock.lock(); let rule = after; lock.unlock()
        if let error = rule(operation, key) { throw error }
    }

    private func record(_ entry: RemoteEntry) -> RemoteEntry {
        lock.lock(); defer { lock.unlock() }
        landed.append((entry.pathLower, entry.contentHash))
        guard bogusHash, case .file(let size, let rev, _, let c, let s) = entry.kind else { return entry }
        var copy = entry
        copy.kind = .file(size: size, rev: rev, contentHash: String(repeating: "0", count: 64), clientModified: c, serverModified: s)
        return copy
    }

    // MARK: RemoteStore

    func upload(file: URL, length: UInt64, commit: RemoteCommit, progress: RemoteProgress?) throws(RemoteError) -> RemoteEntry {
        try enter("upload", commit.path)
        let entry = record(try inner.upload(file: file, length: length, commit: commit, progress: progress))
        try leave("upload", commit.path)
        return entry
    }
    func startSession(concurrent: Bool) throws(RemoteError) -> String {
        try enter("startSession", "")
        let id = try inner.startSession(concurrent: concurrent)
        try leave("startSession", "")
        return id
    }
    func appendSession(id: String, file: URL, offset: UInt64, length: UInt64, close: Bool, progress: RemoteProgress?) throws(RemoteError) {
        try enter("appendSession", "\(id)@\(offset)")
        lock.lock(); inFlightAppends += 1; maxInFlight = max(maxInFlight, inFlightAppends); let delay = appendDelay; lock.unlock()
        defer { lock.lock(); inFlightAppends -= 1; lock.unlock() }
        if delay > 0 { Thread.sleep(forTimeInterval: delay) }
        try inner.appendSession(id: id, file: file, offset: offset, length: length, close: close, progress: progress)
        try leave("appendSession", "\(id)@\(offset)")
    }
    func appendSessionChecked(id: String, bytes: Data, offset: UInt64, contentHash: String) throws(RemoteError) {
        try enter("appendSession", "\(id)@\(offset)")
        try inner.appendSessionChecked(id: id, bytes: bytes, offset: offset, contentHash: contentHash)
        try leave("appendSession", "\(id)@\(offset)")
    }
    /// The next `count` finishBatch calls behave like a client that lost the first reply and
    /// retried: the inner remote commits, and the caller gets the retry's answers (session gone).
    func replayFinishBatch(times count: Int) { lock.lock(); replays = count; lock.unlock() }

    func finishBatch(_ entries: [(session: RemoteUploadedSession, commit: RemoteCommit)]) throws(RemoteError) -> [Result<RemoteEntry, RemoteError>] {
        try enter("finishBatch", entries.first?.commit.path ?? "")
        var results = try inner.finishBatch(entries).map { result in result.map { record($0) } }
        lock.lock(); let replay = replays > 0; if replay { replays -= 1 }; lock.unlock()
        if replay { results = try inner.finishBatch(entries) }
        try leave("finishBatch", entries.first?.commit.path ?? "")
        return results
    }
    func metadata(path: String) throws(RemoteError) -> RemoteEntry? {
        try enter("metadata", path); return try inner.metadata(path: path)
    }
    func listFolder(path: String, recursive: Bool, limit: Int?) throws(RemoteError) -> RemoteListPage {
        try enter("listFolder", path, countsAsBoundary: false)
        return try inner.listFolder(path: path, recursive: recursive, limit: limit)
    }
    func listFolderContinue(cursor: String) throws(RemoteError) -> RemoteListPage { try inner.listFolderContinue(cursor: cursor) }
    func latestCursor(path: String, recursive: Bool) throws(RemoteError) -> String { try inner.latestCursor(path: path, recursive: recursive) }
    func longpoll(cursor: String, timeout: Int) throws(RemoteError) -> (changes: Bool, backoff: Int?) { try inner.longpoll(cursor: cursor, timeout: timeout) }
    func download(path: String, rev: String?, range: Range<UInt64>?, sink: (UnsafeRawBufferPointer) -> Bool) throws(RemoteError) {
        try inner.download(path: path, rev: rev, range: range, sink: sink)
    }
    /// The namespace batches sent, in order: operation name and the entries' paths.
    var namespaceBatches: [(operation: String, paths: [String])] { lock.lock(); defer { lock.unlock() }; return batches }
    private var batches: [(operation: String, paths: [String])] = []
    private func noteBatch(_ operation: String, _ paths: [String]) { lock.lock(); batches.append((operation, paths)); lock.unlock() }

    // Namespace batches: gates and rules by operation name, with the first entry's path as key.
    func createFolders(_ paths: [String]) throws(RemoteError) -> [Result<RemoteEntry, RemoteError>] {
        noteBatch("createFolders", paths)
        try enter("createFolders", paths.first ?? "")
        let results = try inner.createFolders(paths)
        try leave("createFolders", paths.first ?? "")
        return results
    }
    func deleteBatch(_ entries: [RemoteDelete]) throws(RemoteError) -> [RemoteError?] {
        noteBatch("deleteBatch", entries.map(\.path))
        try enter("deleteBatch", entries.first?.path ?? "")
        let results = try inner.deleteBatch(entries)
        try leave("deleteBatch", entries.first?.path ?? "")
        return results
    }
    func moveBatch(_ entries: [RemoteMove]) throws(RemoteError) -> [Result<RemoteEntry, RemoteError>] {
        noteBatch("moveBatch", entries.map { "\($0.from)→\($0.to)" })
        try enter("moveBatch", entries.first?.from ?? "")
        let results = try inner.moveBatch(entries)
        try leave("moveBatch", entries.first?.from ?? "")
        return results
    }
    func createFolder(path: String) throws(RemoteError) -> RemoteEntry { try inner.createFolder(path: path) }
    func delete(path: String) throws(RemoteError) { try inner.delete(path: path) }
    func move(from: String, to: String) throws(RemoteError) -> RemoteEntry { try inner.move(from: from, to: to) }
    func copy(from: String, to: String) throws(RemoteError) -> RemoteEntry { try inner.copy(from: from, to: to) }
    func spaceUsage() throws(RemoteError) -> (used: UInt64, allocated: UInt64) { try inner.spaceUsage() }
}
