/// An in-memory `RemoteStore` with Dropbox's semantics, for unit tests of VFSCache (mountpoint-s3's
/// mock client, in spirit). It keeps a case-insensitive, case-preserving tree, revs, a change log
/// for cursors and longpoll, upload sessions, and per-operation call counters, so tests can assert
/// both results and how many remote calls a cache operation cost.
///
/// `externalWrite`/`externalDelete` change the account as another device would, for conflict and
/// change-feed tests.
import ContentHash
import Foundation
import Synchronization
@testable import VFSCache

final class InMemoryRemote: RemoteStore, @unchecked Sendable {
    // @unchecked: every stored property is only touched with `lock` held.
    private struct Node {
        var id: String
        var pathDisplay: String
        var isFolder: Bool
        var data: [UInt8] = []
        var rev: String = ""
        var clientModified = Date(timeIntervalSince1970: 1_700_000_000)
        var serverModified = Date(timeIntervalSince1970: 1_700_000_000)
    }
    private struct Session { var chunks: [UInt64: [UInt8]] = [:]; var concurrent: Bool; var closed = false; var length: UInt64 = 0 }
    private struct Listing { var pages: [[RemoteChange]]; var seq: Int; var path: String; var recursive: Bool }

    private let lock = NSCondition()
    private var nodes: [String: Node] = [:]          // key: lowercased path, "" is the root
    private var log: [(seq: Int, change: RemoteChange, path: String)] = []
    private var seq = 0
    private var nextNumber = 1
    private var sessions: [String: Session] = [:]
    private var listings: [String: Listing] = [:]
    private var counts: [String: Int] = [:]
    private var epoch = 0
    /// Page size used when a caller passes no limit.
    var defaultPageSize = 1000
    /// Changes per page of the feed (list_folder/continue after a listing); nil: all in one page.
    /// Dropbox ends a page anywhere, e.g. between a path's deletion and the path made again.
    var feedPageSize: Int?
    /// Seconds to pretend each call takes (tests of parallelism).
    var callDelay: TimeInterval = 0

    init() { nodes[""] = Node(id: "id:root", pathDisplay: "", isFolder: true) }

    // MARK: Test helpers

    /// How many times each operation was called ("metadata", "listFolder", "listFolderContinue",
    /// "download", "upload", "startSession", "appendSession", "finishBatch", "createFolder",
    /// "delete", "move", "copy", "createFolders", "deleteBatch", "moveBatch", "latestCursor",
    /// "longpoll", "spaceUsage").
    func calls(_ name: String) -> Int { lock.lock(); defer { lock.unlock() }; return counts[name] ?? 0 }
    func resetCounts() { lock.lock(); counts = [:]; downloadedBytes = 0; lock.unlock() }
    /// Bytes handed out by `download` since the last `resetCounts`.
    private(set) var downloadedBytes = 0

    /// Writes a file as another device would (overwrite, implicit parents).
    @discardableResult
    func externalWrite(_ path: String, _ data: [UInt8], clientModified: Date? = nil) -> RemoteEntry {
        lock.lock(); defer { lock.unlock() }
        return try! commitLocked(RemoteCommit(path: path, mode: .overwrite, clientModified: clientModified), data: data)
    }
    func externalWrite(_ path: String, _ text: String) { externalWrite(path, Array(text.utf8)) }
    func externalMkdir(_ path: String) { _ = try! createFolder(path: path) }
    func externalDelete(_ path: String) { try! delete(path: path) }

    /// The current content of a file, or nil.
    func content(_ path: String) -> [UInt8]? {
        lock.lock(); defer { lock.unlock() }
        guard let node = nodes[path.lowercased()], !node.isFolder else { return nil }
        return node.data
    }
    /// Every path under the root (lowercased), sorted.
    func allPaths() -> [String] { lock.lock(); defer { lock.unlock() }; return nodes.keys.filter { !$0.isEmpty }.sorted() }
    /// Makes every outstanding cursor answer `cursorReset`.
    func invalidateCursors() { lock.lock(); epoch += 1; listings = [:]; lock.unlock() }

    // MARK: RemoteStore

    func metadata(path: String) throws(RemoteError) -> RemoteEntry? {
        let key = try begin("metadata", path)
        defer { lock.unlock() }
        guard let node = nodes[key] else { return nil }
        return entry(key, node)
    }

    func listFolder(path: String, recursive: Bool, limit: Int?) throws(RemoteError) -> RemoteListPage {
        let key = try begin("listFolder", path, allowRoot: true)
        defer { lock.unlock() }
        guard let node = nodes[key] else { throw .notFound(path) }
        guard node.isFolder else { throw .notFolder(path) }
        var changes: [RemoteChange] = []
        for (childKey, child) in nodes.sorted(by: { $0.key < $1.key }) where isUnder(childKey, key, recursive: recursive) {
            changes.append(.upsert(entry(childKey, child)))
        }
        let size = max(1, limit ?? defaultPageSize)
        var pages = stride(from: 0, to: changes.count, by: size).map { Array(changes[$0..<min(changes.count, $0 + size)]) }
        if pages.isEmpty { pages = [[]] }
        return nextPage(Listing(pages: pages, seq: seq, path: key, recursive: recursive))
    }

    func listFolderContinue(cursor: String) throws(RemoteError) -> RemoteListPage {
        lock.lock(); defer { lock.unlock() }
        count("listFolderContinue")
        guard var listing = listings[cursor] else { throw .cursorReset }
        if listing.pages.isEmpty {
            // Exhausted: the cursor now means "changes since listing.seq".
            var changes: [RemoteChange] = []
            for item in log where item.seq > listing.seq && isUnder(item.path, listing.path, recursive: listing.recursive) {
                changes.append(item.change)
            }
            let size = max(1, feedPageSize ?? changes.count)
            listing.pages = changes.isEmpty ? [[]] : stride(from: 0, to: changes.count, by: size).map {
                Array(changes[$0..<min(changes.count, $0 + size)])
            }
            listing.seq = seq
        }
        return nextPage(listing)
    }

    func latestCursor(path: String, recursive: Bool) throws(RemoteError) -> String {
        let key = try begin("latestCursor", path, allowRoot: true)
        defer { lock.unlock() }
        return register(Listing(pages: [], seq: seq, path: key, recursive: recursive))
    }

    func longpoll(cursor: String, timeout: Int) throws(RemoteError) -> (changes: Bool, backoff: Int?) {
        lock.lock(); defer { lock.unlock() }
        count("longpoll")
        let deadline = Date().addingTimeInterval(TimeInterval(timeout))
        while true {
            guard let listing = listings[cursor] else { throw .cursorReset }
            if log.contains(where: { $0.seq > listing.seq && isUnder($0.path, listing.path, recursive: listing.recursive) }) {
                return (true, nil)
            }
            if !lock.wait(until: deadline) { return (false, nil) }
        }
    }

    func download(path: String, rev: String?, range: Range<UInt64>?, sink: (UnsafeRawBufferPointer) -> Bool) throws(RemoteError) {
        let key = try begin("download", path)
        // By rev when given, as the real adapter asks ("rev:…"): a file moved meanwhile keeps it.
        let found = rev.flatMap { rev in nodes.values.first { !$0.isFolder && $0.rev == rev } }
            ?? nodes[key] ?? nodes.values.first(where: { $0.id == path })
        guard let node = found else { lock.unlock(); throw .notFound(path) }
        lock.unlock()
        guard !node.isFolder else { throw .notFile(path) }
        if let rev, rev != node.rev { throw .notFound("\(path) at rev \(rev)") }
        let lower = Int(min(range?.lowerBound ?? 0, UInt64(node.data.count)))
        let upper = Int(min(range?.upperBound ?? UInt64(node.data.count), UInt64(node.data.count)))
        lock.lock(); downloadedBytes += upper - lower; lock.unlock()
        let ok = node.data[lower..<upper].withUnsafeBytes { sink($0) }
        if !ok { throw .cancelled }
    }

    func upload(file: URL, length: UInt64, commit: RemoteCommit, progress: RemoteProgress?) throws(RemoteError) -> RemoteEntry {
        let data = try read(file, offset: 0, length: length)
        _ = progress?(length, length)
        lock.lock(); defer { lock.unlock() }
        count("upload")
        return try commitLocked(commit, data: data)
    }

    func startSession(concurrent: Bool) throws(RemoteError) -> String {
        lock.lock(); defer { lock.unlock() }
        count("startSession")
        let id = "session-\(nextNumber)"; nextNumber += 1
        sessions[id] = Session(concurrent: concurrent)
        return id
    }

    func appendSessionChecked(id: String, bytes: Data, offset: UInt64, contentHash: String) throws(RemoteError) {
        let data = [UInt8](bytes)
        guard DropboxContentHasher.hash(data) == contentHash else { throw .other("content_hash_mismatch") }
        lock.lock(); defer { lock.unlock() }
        count("appendSessionChecked")
        try appendLocked(id: id, data: data, offset: offset, close: false)
    }

    func appendSession(id: String, file: URL, offset: UInt64, length: UInt64, close: Bool, progress: RemoteProgress?) throws(RemoteError) {
        let data = try read(file, offset: offset, length: length)
        lock.lock()
        count("appendSession")
        do throws(RemoteError) { try appendLocked(id: id, data: data, offset: offset, close: close) } catch { lock.unlock(); throw error }
        lock.unlock()
        _ = progress?(length, length)
    }

    private func appendLocked(id: String, data: [UInt8], offset: UInt64, close: Bool) throws(RemoteError) {
        let length = UInt64(data.count)
        guard var session = sessions[id] else { throw .sessionGone(id) }
        guard !session.closed else { throw .other("session \(id) is closed") }
        if session.concurrent {
            let block = UInt64(4 * 1024 * 1024)
            guard offset % block == 0, close || length % block == 0 else { throw .other("concurrent_session_invalid_offset") }
        } else if offset != session.length {
            throw .other("incorrect_offset: expected \(session.length)")
        }
        session.chunks[offset] = data
        session.length = max(session.length, offset + length)
        session.closed = close
        sessions[id] = session
    }

    func finishBatch(_ entries: [(session: RemoteUploadedSession, commit: RemoteCommit)]) throws(RemoteError) -> [Result<RemoteEntry, RemoteError>] {
        lock.lock(); defer { lock.unlock() }
        count("finishBatch")
        return entries.map { item in
            guard let session = sessions[item.session.sessionID] else { return .failure(.sessionGone(item.session.sessionID)) }
            guard session.closed else { return .failure(.other("not_closed")) }
            var data: [UInt8] = []
            for offset in session.chunks.keys.sorted() {
                guard offset == UInt64(data.count) else { return .failure(.other("concurrent_session_missing_data")) }
                data += session.chunks[offset]!
            }
            guard UInt64(data.count) == item.session.length else { return .failure(.other("length mismatch")) }
            sessions[item.session.sessionID] = nil
            // Dropbox checks no whole-file hash at finish (files.stone: UploadSessionFinishArg's
            // `content_hash` covers the call's own body, and finish_batch has none): the engine must.
            do throws(RemoteError) { return .success(try commitLocked(item.commit, data: data, checkingHash: false)) } catch { return .failure(error) }
        }
    }

    func createFolder(path: String) throws(RemoteError) -> RemoteEntry {
        let key = try begin("createFolder", path)
        defer { lock.unlock() }
        return try createFolderLocked(key, path)
    }

    func delete(path: String) throws(RemoteError) {
        let key = try begin("delete", path)
        defer { lock.unlock() }
        try deleteLocked(key, path, parentRev: nil)
    }

    func move(from: String, to: String) throws(RemoteError) -> RemoteEntry {
        try relocate("move", from: from, to: to, keepSource: false)
    }

    func copy(from: String, to: String) throws(RemoteError) -> RemoteEntry {
        try relocate("copy", from: from, to: to, keepSource: true)
    }

    // Batches: one counted call each ("createFolders", "deleteBatch", "moveBatch"), entries done
    // in order like their single calls.
    func createFolders(_ paths: [String]) throws(RemoteError) -> [Result<RemoteEntry, RemoteError>] {
        try batch("createFolders")
        defer { lock.unlock() }
        return paths.map { path in
            Result { () throws(RemoteError) in try createFolderLocked(try Self.validKey(path), path) }
        }
    }

    func deleteBatch(_ entries: [RemoteDelete]) throws(RemoteError) -> [RemoteError?] {
        try batch("deleteBatch")
        defer { lock.unlock() }
        return entries.map { entry in
            do throws(RemoteError) {
                try deleteLocked(try Self.validKey(entry.path), entry.path, parentRev: entry.parentRev)
                return nil
            } catch {
                return error
            }
        }
    }

    func moveBatch(_ entries: [RemoteMove]) throws(RemoteError) -> [Result<RemoteEntry, RemoteError>] {
        try batch("moveBatch")
        defer { lock.unlock() }
        return entries.map { entry in
            Result { () throws(RemoteError) in
                try relocateLocked(try Self.validKey(entry.from), from: entry.from, to: entry.to, keepSource: false)
            }
        }
    }

    func spaceUsage() throws(RemoteError) -> (used: UInt64, allocated: UInt64) {
        lock.lock(); defer { lock.unlock() }
        count("spaceUsage")
        let used = nodes.values.reduce(UInt64(0)) { $0 + UInt64($1.data.count) }
        return (used, 2 * 1024 * 1024 * 1024 * 1024)
    }

    // MARK: Internals (all with `lock` held unless noted)

    /// Counts the call, validates the path, and returns with the lock HELD.
    private func begin(_ name: String, _ path: String, allowRoot: Bool = false) throws(RemoteError) -> String {
        if callDelay > 0 { Thread.sleep(forTimeInterval: callDelay) }
        lock.lock()
        count(name)
        if path.isEmpty {
            guard allowRoot else { lock.unlock(); throw .malformedPath("the root has no metadata") }
            return ""
        }
        do throws(RemoteError) { return try Self.validKey(path) } catch { lock.unlock(); throw error }
    }

    /// Counts a batch call and returns with the lock HELD.
    private func batch(_ name: String) throws(RemoteError) {
        if callDelay > 0 { Thread.sleep(forTimeInterval: callDelay) }
        lock.lock()
        count(name)
    }

    private static func validKey(_ path: String) throws(RemoteError) -> String {
        guard path.hasPrefix("/"), !path.hasSuffix("/"), !path.contains("//") else { throw .malformedPath(path) }
        return path.lowercased()
    }

    private func createFolderLocked(_ key: String, _ path: String) throws(RemoteError) -> RemoteEntry {
        if let existing = nodes[key] { throw .conflict(existing.isFolder ? "path/conflict/folder" : "path/conflict/file") }
        try makeParentsLocked(of: key, display: path)
        let node = Node(id: newID(), pathDisplay: path, isFolder: true)
        nodes[key] = node
        record(.upsert(entry(key, node)), key)
        return entry(key, node)
    }

    private func deleteLocked(_ key: String, _ path: String, parentRev: String?) throws(RemoteError) {
        guard let node = nodes[key] else { throw .notFound(path) }
        if let parentRev, node.isFolder || node.rev != parentRev { throw .conflict("path_write/conflict/file") }
        for childKey in nodes.keys where childKey == key || childKey.hasPrefix(key + "/") { nodes[childKey] = nil }
        record(.deleted(pathLower: key, pathDisplay: node.pathDisplay), key)
    }

    private func count(_ name: String) { counts[name, default: 0] += 1 }

    private func isUnder(_ key: String, _ folder: String, recursive: Bool) -> Bool {
        guard key != folder else { return false }
        let prefix = folder + "/"
        guard key.hasPrefix(prefix) else { return false }
        return recursive || !key.dropFirst(prefix.count).contains("/")
    }

    private func entry(_ key: String, _ node: Node) -> RemoteEntry {
        let name = String(node.pathDisplay.split(separator: "/").last ?? "")
        if node.isFolder {
            return RemoteEntry(id: node.id, name: name, pathLower: key, pathDisplay: node.pathDisplay, kind: .folder)
        }
        return RemoteEntry(id: node.id, name: name, pathLower: key, pathDisplay: node.pathDisplay,
                           kind: .file(size: UInt64(node.data.count), rev: node.rev,
                                       contentHash: DropboxContentHasher.hash(node.data),
                                       clientModified: node.clientModified, serverModified: node.serverModified))
    }

    private func newID() -> String { defer { nextNumber += 1 }; return "id:fake\(nextNumber)" }
    private func newRev() -> String { defer { nextNumber += 1 }; return String(format: "%012x", 0x1_0000_0000 + nextNumber) }

    private func record(_ change: RemoteChange, _ key: String) {
        seq += 1
        log.append((seq, change, key))
        lock.broadcast()
    }

    private func register(_ listing: Listing) -> String {
        let cursor = "cursor-\(epoch)-\(nextNumber)"; nextNumber += 1
        listings[cursor] = listing
        return cursor
    }

    private func nextPage(_ listing: Listing) -> RemoteListPage {
        var rest = listing
        let page = rest.pages.isEmpty ? [] : rest.pages.removeFirst()
        let hasMore = !rest.pages.isEmpty
        return RemoteListPage(changes: page, cursor: register(rest), hasMore: hasMore)
    }

    private func makeParentsLocked(of key: String, display: String) throws(RemoteError) {
        let parts = display.split(separator: "/").dropLast()
        var path = ""
        for part in parts {
            path += "/" + part
            if let existing = nodes[path.lowercased()] {
                if !existing.isFolder { throw .conflict("path/conflict/file_ancestor") }
                continue
            }
            let node = Node(id: newID(), pathDisplay: path, isFolder: true)
            nodes[path.lowercased()] = node
            record(.upsert(entry(path.lowercased(), node)), path.lowercased())
        }
    }

    private func commitLocked(_ commit: RemoteCommit, data: [UInt8], checkingHash: Bool = true) throws(RemoteError) -> RemoteEntry {
        let key = commit.path.lowercased()
        if checkingHash, let hash = commit.contentHash, hash != DropboxContentHasher.hash(data) { throw .other("content_hash_mismatch") }
        // An update of a file that is gone conflicts, as Dropbox does with strict_conflict (which
        // the mount always sends; files.stone CommitInfo.strict_conflict).
        if nodes[key] == nil, case .update = commit.mode { throw .conflict("path/conflict/file") }
        if let existing = nodes[key] {
            if existing.isFolder { throw .conflict("path/conflict/folder") }
            if existing.data == data { return entry(key, existing) }
            switch commit.mode {
            case .add: throw .conflict("path/conflict/file")
            case .update(let rev) where rev != existing.rev: throw .conflict("path/conflict/file")
            default: break
            }
        }
        try makeParentsLocked(of: key, display: commit.path)
        let now = Date(timeIntervalSince1970: Date().timeIntervalSince1970.rounded(.down))
        let node = Node(id: nodes[key]?.id ?? newID(), pathDisplay: nodes[key]?.pathDisplay ?? commit.path, isFolder: false,
                        data: data, rev: newRev(), clientModified: commit.clientModified ?? now, serverModified: now)
        nodes[key] = node
        let result = entry(key, node)
        record(.upsert(result), key)
        return result
    }

    private func relocate(_ name: String, from: String, to: String, keepSource: Bool) throws(RemoteError) -> RemoteEntry {
        let fromKey = try begin(name, from)
        defer { lock.unlock() }
        return try relocateLocked(fromKey, from: from, to: to, keepSource: keepSource)
    }

    private func relocateLocked(_ fromKey: String, from: String, to: String, keepSource: Bool) throws(RemoteError) -> RemoteEntry {
        let toKey = to.lowercased()
        guard let source = nodes[fromKey] else { throw .notFound(from) }
        // As on Dropbox (files.stone on move_v2; takezoh/obsidian-air-sync#47): a case-only move
        // answers success, keeps the old case and reports nothing in the feed.
        if toKey == fromKey && !keepSource { return entry(fromKey, source) }
        if toKey.hasPrefix(fromKey + "/") { throw .invalidOperation("cant_move_folder_into_itself") }
        if toKey != fromKey, nodes[toKey] != nil { throw .conflict("to/conflict") }
        try makeParentsLocked(of: toKey, display: to)
        let moved = nodes.filter { $0.key == fromKey || $0.key.hasPrefix(fromKey + "/") }
        if !keepSource {
            for key in moved.keys { nodes[key] = nil }
            record(.deleted(pathLower: fromKey, pathDisplay: source.pathDisplay), fromKey)
        }
        for (key, var node) in moved.sorted(by: { $0.key < $1.key }) {
            let suffix = node.pathDisplay.dropFirst(source.pathDisplay.count)
            node.pathDisplay = to + suffix
            if keepSource { node.id = newID(); if !node.isFolder { node.rev = newRev() } }
            let newKey = toKey + key.dropFirst(fromKey.count)
            nodes[newKey] = node
            record(.upsert(entry(newKey, node)), newKey)
        }
        return entry(toKey, nodes[toKey]!)
    }

    private func read(_ file: URL, offset: UInt64, length: UInt64) throws(RemoteError) -> [UInt8] {
        do {
            let handle = try FileHandle(forReadingFrom: file)
            defer { try? handle.close() }
            try handle.seek(toOffset: offset)
            let data = try handle.read(upToCount: Int(length)) ?? Data()
            guard data.count == Int(length) else { throw RemoteError.other("short read of \(file.path)") }
            return Array(data)
        } catch let error as RemoteError {
            throw error
        } catch {
            throw .other("cannot read \(file.path): \(error)")
        }
    }
}
