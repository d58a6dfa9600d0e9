/// A `RemoteStore` wrapper that injects failures (mountpoint-s3's failure client, in spirit):
/// a test decides, per call, whether the operation fails and with what, before it reaches the
/// wrapped remote. Used to check that VFSCache surfaces errors as errno, retries where it should,
/// and loses nothing.
import Foundation
import Synchronization
@testable import VFSCache

final class FailingRemote: RemoteStore, Sendable {
    let inner: any RemoteStore
    /// Given the operation name (same names as `InMemoryRemote.calls`) and its path (or ""),
    /// returns an error to throw instead of calling through, or nil to pass.
    private let rule: Mutex<@Sendable (String, String) -> RemoteError?>

    init(_ inner: any RemoteStore, rule: @escaping @Sendable (String, String) -> RemoteError? = { _, _ in nil }) {
        self.inner = inner
        self.rule = Mutex(rule)
    }

    func setRule(_ newRule: @escaping @Sendable (String, String) -> RemoteError?) { rule.withLock { $0 = newRule } }

    /// Fails the next `times` calls of `operation` with `error`, then passes.
    func failNext(_ operation: String, times: Int, with error: RemoteError) {
        let remaining = Mutex(times)
        setRule { name, _ in
            guard name == operation else { return nil }
            return remaining.withLock { count in
                guard count > 0 else { return nil }
                count -= 1
                return error
            }
        }
    }

    private func check(_ name: String, _ path: String) throws(RemoteError) {
        let current = rule.withLock { $0 }
        if let error = current(name, path) { throw error }
    }

    func metadata(path: String) throws(RemoteError) -> RemoteEntry? {
        try check("metadata", path); return try inner.metadata(path: path)
    }
    /// Listings start with an empty page that has more after it, as Dropbox's may
    /// (dropbox/dropbox-sdk-java#281; the emulator's `listing_pages`).
    let emptyFirstPages = Atomic<Bool>(false)
    private static let emptyPageCursor = "empty first page of "

    func listFolder(path: String, recursive: Bool, limit: Int?) throws(RemoteError) -> RemoteListPage {
        try check("listFolder", path)
        let page = try inner.listFolder(path: path, recursive: recursive, limit: limit)
        guard emptyFirstPages.load(ordering: .relaxed) else { return page }
        // The real first page comes with the next call; its cursor is kept in the empty page's.
        Self.heldPages.withLock { $0[path + "#" + page.cursor] = page }
        return RemoteListPage(changes: [], cursor: Self.emptyPageCursor + path + "#" + page.cursor, hasMore: true)
    }
    func listFolderContinue(cursor: String) throws(RemoteError) -> RemoteListPage {
        try check("listFolderContinue", "")
        if cursor.hasPrefix(Self.emptyPageCursor),
           let page = Self.heldPages.withLock({ $0.removeValue(forKey: String(cursor.dropFirst(Self.emptyPageCursor.count))) }) {
            return page
        }
        return try inner.listFolderContinue(cursor: cursor)
    }
    private static let heldPages = Mutex<[String: RemoteListPage]>([:])
    func latestCursor(path: String, recursive: Bool) throws(RemoteError) -> String {
        try check("latestCursor", path); return try inner.latestCursor(path: path, recursive: recursive)
    }
    func longpoll(cursor: String, timeout: Int) throws(RemoteError) -> (changes: Bool, backoff: Int?) {
        try check("longpoll", ""); return try inner.longpoll(cursor: cursor, timeout: timeout)
    }
    /// Downloads of more than this many bytes deliver that many, then fail as a reset connection
    /// would (nil: downloads pass whole).
    let cutDownloadsAfter = Mutex<Int?>(nil)

    func download(path: String, rev: String?, range: Range<UInt64>?, sink: (UnsafeRawBufferPointer) -> Bool) throws(RemoteError) {
        try check("download", path)
        guard let limit = cutDownloadsAfter.withLock({ $0 }), let range, range.count > limit else {
            return try inner.download(path: path, rev: rev, range: range, sink: sink)
        }
        var sent = 0
        do throws(RemoteError) {
            try inner.download(path: path, rev: rev, range: range) { chunk in
                let count = min(chunk.count, limit - sent)
                guard count > 0, sink(UnsafeRawBufferPointer(rebasing: chunk[..<count])) else { return false }
                sent += count
                return sent < limit
            }
        } catch {
            guard sent == limit else { throw error }
        }
        throw .unavailable("connection reset after \(limit) bytes")
    }
    func upload(file: URL, length: UInt64, commit: RemoteCommit, progress: RemoteProgress?) throws(RemoteError) -> RemoteEntry {
        try check("upload", commit.path); return try inner.upload(file: file, length: length, commit: commit, progress: progress)
    }
    func startSession(concurrent: Bool) throws(RemoteError) -> String {
        try check("startSession", ""); return try inner.startSession(concurrent: concurrent)
    }
    func appendSession(id: String, file: URL, offset: UInt64, length: UInt64, close: Bool, progress: RemoteProgress?) throws(RemoteError) {
        try check("appendSession", id)
        try inner.appendSession(id: id, file: file, offset: offset, length: length, close: close, progress: progress)
    }
    func appendSessionChecked(id: String, bytes: Data, offset: UInt64, contentHash: String) throws(RemoteError) {
        try check("appendSession", id)
        try inner.appendSessionChecked(id: id, bytes: bytes, offset: offset, contentHash: contentHash)
    }
    func finishBatch(_ entries: [(session: RemoteUploadedSession, commit: RemoteCommit)]) throws(RemoteError) -> [Result<RemoteEntry, RemoteError>] {
        try check("finishBatch", ""); return try inner.finishBatch(entries)
    }
    func createFolder(path: String) throws(RemoteError) -> RemoteEntry {
        try check("createFolder", path); return try inner.createFolder(path: path)
    }
    func delete(path: String) throws(RemoteError) {
        try check("delete", path); try inner.delete(path: path)
    }
    func move(from: String, to: String) throws(RemoteError) -> RemoteEntry {
        try check("move", from); return try inner.move(from: from, to: to)
    }
    func copy(from: String, to: String) throws(RemoteError) -> RemoteEntry {
        try check("copy", from); return try inner.copy(from: from, to: to)
    }
    func spaceUsage() throws(RemoteError) -> (used: UInt64, allocated: UInt64) {
        try check("spaceUsage", ""); return try inner.spaceUsage()
    }
    func createFolders(_ paths: [String]) throws(RemoteError) -> [Result<RemoteEntry, RemoteError>] {
        try check("createFolders", paths.first ?? ""); return try inner.createFolders(paths)
    }
    func deleteBatch(_ entries: [RemoteDelete]) throws(RemoteError) -> [RemoteError?] {
        try check("deleteBatch", entries.first?.path ?? ""); return try inner.deleteBatch(entries)
    }
    func moveBatch(_ entries: [RemoteMove]) throws(RemoteError) -> [Result<RemoteEntry, RemoteError>] {
        try check("moveBatch", entries.first?.from ?? ""); return try inner.moveBatch(entries)
    }
}
