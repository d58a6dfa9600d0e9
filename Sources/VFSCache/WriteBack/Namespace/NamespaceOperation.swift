/// A namespace change the mount made (mkdir, unlink, rmdir, rename) that Dropbox has not done
/// yet, and its row in the upload journal's `namespace_ops` table. mkdir, unlink, rmdir and rename
/// return once the operation is journaled and shown on the mount, as a close returns once the file
/// is journaled; the engine's namespace queue (NamespaceQueue.swift) sends it to Dropbox later, in
/// order, in batches (NamespaceDispatcher.swift).
///
/// An operation's `sequence` comes from the engine's generation counter, the one closes draw
/// from, so "this rename happened before that close" is a comparison, also across restarts.
import Foundation

/// What a queued operation does on Dropbox.
public enum NamespaceOperationKind: String, Sendable, Equatable {
    /// Create the folder `path` (create_folder_batch).
    case mkdir
    /// Delete the file `path`, only at `parentRev` (delete_batch with `parent_rev`), so a file
    /// someone else changed meanwhile is kept. Without a rev, only a file whose content hash is one
    /// of `ownHashes` (one of our own commits whose reply was lost) is deleted.
    case delete
    /// Delete the folder `path` if it is empty on Dropbox (checked with `list_folder` first: a
    /// folder delete is recursive there, and a file someone else put in it must survive).
    case deleteFolder
    /// Move `path` to `target` (move_batch_v2).
    case move
}

/// One queued operation (memory and journal). Only touched with the engine's lock held.
struct NamespaceOperation: Sendable, Equatable {
    let sequence: UInt64
    let kind: NamespaceOperationKind
    /// Display case, relative to the mount root.
    var path: String
    /// The move's target.
    var target: String?
    var parentRev: String?
    var ownHashes: [String] = []
    var attempts = 0
    var lastError: String?
    let createdAt: Date

    // Not journaled:
    /// The facade has shown it on the mount (or it was read back at start): it may be sent.
    var released = true
    /// Sent in the batch now in flight.
    var inFlight = false
    var notBefore = Date.distantPast
    /// The last attempt failed with an error that needs time or a person (held, retried slowly).
    var hardError: RemoteError?
    var failedAt = Date.distantPast
    /// The last attempt could not reach Dropbox (`.unavailable`): why, for a command that would
    /// otherwise wait for this operation (`unreachableReason`).
    var unreachable: String?

    /// The path keys it touches (its path, and a move's target).
    var keys: [String] {
        target.map { [WriteBackEngine.key(path), WriteBackEngine.key($0)] } ?? [WriteBackEngine.key(path)]
    }

    /// How logs, status and sync name it.
    var summary: String {
        switch kind {
        case .mkdir: "mkdir \(path)"
        case .delete: "unlink \(path)"
        case .deleteFolder: "rmdir \(path)"
        case .move: "rename \(path) → \(target ?? "?")"
        }
    }

    /// The batch it may join: deletes of files and of folders go in one delete_batch.
    var batchKind: NamespaceOperationKind { kind == .deleteFolder ? .delete : kind }
}

extension UploadJournal {
    static let namespaceSchema = """
        CREATE TABLE IF NOT EXISTS namespace_ops(
            sequence INTEGER PRIMARY KEY,
            kind TEXT NOT NULL,
            path TEXT NOT NULL,
            target TEXT,
            parent_rev TEXT,
            own_hashes TEXT NOT NULL DEFAULT '',
            attempts INTEGER NOT NULL DEFAULT 0,
            last_error TEXT,
            created_at REAL NOT NULL);
        """

    func allNamespaceOperations() throws(SQLiteError) -> [NamespaceOperation] {
        try database.query("SELECT * FROM namespace_ops ORDER BY sequence").compactMap { row in
            guard let kind = NamespaceOperationKind(rawValue: row.text("kind") ?? "") else { return nil }
            return NamespaceOperation(sequence: row.uint64("sequence") ?? 0, kind: kind, path: row.text("path") ?? "",
                                      target: row.text("target"), parentRev: row.text("parent_rev"),
                                      ownHashes: (row.text("own_hashes") ?? "").split(separator: ",").map(String.init),
                                      attempts: row.int("attempts") ?? 0, lastError: row.text("last_error"),
                                      createdAt: row.date("created_at") ?? Date())
        }
    }

    func save(_ operation: NamespaceOperation) throws(SQLiteError) {
        try database.run("""
            INSERT OR REPLACE INTO namespace_ops(sequence, kind, path, target, parent_rev, own_hashes, attempts, last_error, created_at)
            VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?)
            """, [operation.sequence, operation.kind.rawValue, operation.path, operation.target, operation.parentRev,
                  operation.ownHashes.joined(separator: ","), operation.attempts, operation.lastError, operation.createdAt])
    }

    func deleteNamespaceOperation(_ sequence: UInt64) throws(SQLiteError) {
        try database.run("DELETE FROM namespace_ops WHERE sequence = ?", [sequence])
    }
}

/// Path keys with their ancestors, so that "does this key overlap one of them (equal, ancestor
/// or descendant)?" costs O(depth) whatever their number (the queue holds thousands during an
/// `rm -rf`, and every upload asks before it starts).
struct PathOverlapSet {
    private var keys: [String: Int] = [:]
    /// Proper ancestors of the keys, with how many keys lie under each.
    private var ancestors: [String: Int] = [:]

    var isEmpty: Bool { keys.isEmpty }

    mutating func insert(_ key: String) {
        keys[key, default: 0] += 1
        for ancestor in Self.ancestors(of: key) { ancestors[ancestor, default: 0] += 1 }
    }

    mutating func remove(_ key: String) {
        guard let count = keys[key] else { return }
        keys[key] = count > 1 ? count - 1 : nil
        for ancestor in Self.ancestors(of: key) {
            let left = (ancestors[ancestor] ?? 1) - 1
            ancestors[ancestor] = left > 0 ? left : nil
        }
    }

    func contains(_ key: String) -> Bool { keys[key] != nil }

    /// Whether `key` equals one of the keys, or is an ancestor or a descendant of one.
    func overlaps(_ key: String) -> Bool {
        if keys[key] != nil || ancestors[key] != nil { return true }
        return Self.ancestors(of: key).contains { keys[$0] != nil }
    }

    /// "/a/b/c" → "/a/b", "/a" (the root, "", is nobody's business here). On the UTF-8 bytes:
    /// "/" is one byte that never occurs inside another character's, and a walk by Characters
    /// (grapheme breaking) was most of the dispatcher's time.
    static func ancestors(of key: String) -> [String] {
        var result: [String] = []
        let utf8 = key.utf8
        var end = utf8.endIndex
        while let slash = utf8[..<end].lastIndex(of: UInt8(ascii: "/")), slash != utf8.startIndex {
            end = slash
            result.append(String(Substring(utf8[..<slash])))
        }
        return result
    }
}
