/// The upload journal: SQLite at `<cacheDir>/journal.sqlite`, one row per dirty file, written
/// durably (WAL + synchronous=FULL) before `close()` returns, and one row per namespace change
/// Dropbox has not done yet (`namespace_ops`, NamespaceOperation.swift). It is what makes write-back survive a
/// kill -9 or a reboot: a new engine on the same cache directory reads every row and resumes.
///
/// A row lives from the close that made the file dirty until Dropbox confirmed the commit of its
/// latest generation with the expected content hash. Confirmed chunks of an upload session are
/// kept in `upload_chunks` (keyed by staging file, which is stable across renames) so a concurrent
/// session still valid on the server resumes where it stopped.
import Foundation

/// What a commit is based on: a new file is committed with `add`, a file opened at rev R with
/// `update(R)`, so a change someone else made meanwhile becomes a conflict, never an overwrite.
public enum WriteBase: Sendable, Equatable {
    case newFile
    case revision(String)

    var mode: RemoteWriteMode {
        switch self {
        case .newFile: return .add
        case .revision(let rev): return .update(rev: rev)
        }
    }
}

/// Where a journal row is in its life (see docs/WRITEBACK.md).
public enum UploadState: String, Sendable, Equatable {
    /// Closed and fsync'ed, waiting for a worker.
    case pending
    /// An upload session is open; confirmed chunks are in `upload_chunks`.
    case uploading
    /// The commit request was sent; its outcome is unknown until the reply (after a crash: ask
    /// the server whether our content hash landed).
    case committing
    /// The last attempt failed with an error that needs time or a person (insufficient space, a
    /// refused name...). Still journaled and retried slowly; fsync and sync report the error.
    case failed
    /// Dropbox refuses to write there (no_write_permission: a read-only shared folder). Kept,
    /// reported, and not retried by itself: a rename to a writable folder, a new close, or the
    /// next mount tries again.
    case refused
}

/// One journal row.
struct UploadRecord: Sendable, Equatable {
    var pathKey: String
    var path: String
    var staging: String
    var base: WriteBase
    var clientModified: Date?
    var contentHash: String?
    var size: UInt64
    var generation: UInt64
    var state: UploadState
    var sessionID: String?
    var sessionConcurrent = false
    var sessionClosed = false
    /// Set once a conflict was detected: ours is committed here (a conflicted copy) with `add`.
    var commitPath: String?
    var lastError: String?
    var attempts = 0
    /// Content hashes of our last commits of this file whose replies may have been lost: a later
    /// conflict whose remote bytes match one of them is our own earlier version, not someone else's.
    var sentHashes: [String] = []
}

/// A conflict that was resolved by keeping both versions.
public struct ConflictRecord: Sendable, Equatable {
    public var path: String
    public var copyPath: String
    public var at: Date
}

final class UploadJournal: Sendable {
    let database: SQLiteDatabase

    init(cacheDirectory: URL) throws(SQLiteError) {
        database = try SQLiteDatabase(path: cacheDirectory.appendingPathComponent("journal.sqlite").path)
        try database.execute("""
            CREATE TABLE IF NOT EXISTS uploads(
                path_key TEXT PRIMARY KEY,
                path TEXT NOT NULL,
                staging TEXT NOT NULL,
                base_rev TEXT,
                client_modified REAL,
                content_hash TEXT,
                size INTEGER NOT NULL,
                generation INTEGER NOT NULL,
                state TEXT NOT NULL,
                session_id TEXT,
                session_concurrent INTEGER NOT NULL DEFAULT 0,
                session_closed INTEGER NOT NULL DEFAULT 0,
                commit_path TEXT,
                last_error TEXT,
                attempts INTEGER NOT NULL DEFAULT 0,
                updated_at REAL NOT NULL,
                sent_hashes TEXT NOT NULL DEFAULT '');
            CREATE TABLE IF NOT EXISTS upload_chunks(
                staging TEXT NOT NULL,
                session_id TEXT NOT NULL,
                offset INTEGER NOT NULL,
                length INTEGER NOT NULL,
                PRIMARY KEY(staging, session_id, offset));
            CREATE TABLE IF NOT EXISTS conflicts(
                id INTEGER PRIMARY KEY AUTOINCREMENT,
                path TEXT NOT NULL,
                copy_path TEXT NOT NULL,
                at REAL NOT NULL);
            CREATE TABLE IF NOT EXISTS journal_meta(key TEXT PRIMARY KEY, value INTEGER NOT NULL);
            CREATE TABLE IF NOT EXISTS case_renames(
                temporary TEXT PRIMARY KEY,
                source TEXT NOT NULL,
                target TEXT NOT NULL);
            """)
        try database.execute(Self.namespaceSchema)
        // Journals written before `sent_hashes` existed.
        let columns = try database.query("PRAGMA table_info(uploads)").compactMap { $0.text("name") }
        if !columns.contains("sent_hashes") {
            try database.execute("ALTER TABLE uploads ADD COLUMN sent_hashes TEXT NOT NULL DEFAULT ''")
        }
    }

    // MARK: Rows

    func allRecords() throws(SQLiteError) -> [UploadRecord] {
        try database.query("SELECT * FROM uploads ORDER BY generation").map(Self.record)
    }

    func record(pathKey: String) throws(SQLiteError) -> UploadRecord? {
        try database.query("SELECT * FROM uploads WHERE path_key = ?", [pathKey]).first.map(Self.record)
    }

    /// Inserts or replaces the row for `record.pathKey`; durable when this returns.
    func save(_ record: UploadRecord) throws(SQLiteError) {
        let baseRev: String? = if case .revision(let rev) = record.base { rev } else { nil }
        try database.run("""
            INSERT OR REPLACE INTO uploads(path_key, path, staging, base_rev, client_modified, content_hash,
                size, generation, state, session_id, session_concurrent, session_closed, commit_path,
                last_error, attempts, updated_at, sent_hashes)
            VALUES(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
            """, [record.pathKey, record.path, record.staging, baseRev, record.clientModified, record.contentHash,
                  record.size, record.generation, record.state.rawValue, record.sessionID,
                  record.sessionConcurrent, record.sessionClosed, record.commitPath, record.lastError,
                  record.attempts, Date(), record.sentHashes.joined(separator: ",")])
    }

    func delete(pathKey: String) throws(SQLiteError) {
        try database.run("DELETE FROM uploads WHERE path_key = ?", [pathKey])
    }

    // MARK: Session chunks

    /// Chunks of `sessionID` the server confirmed, offset → length.
    func confirmedChunks(staging: String, sessionID: String) throws(SQLiteError) -> [UInt64: UInt64] {
        var chunks: [UInt64: UInt64] = [:]
        for row in try database.query("SELECT offset, length FROM upload_chunks WHERE staging = ? AND session_id = ?",
                                      [staging, sessionID]) {
            chunks[row.uint64("offset") ?? 0] = row.uint64("length") ?? 0
        }
        return chunks
    }

    func confirmChunk(staging: String, sessionID: String, offset: UInt64, length: UInt64) throws(SQLiteError) {
        try database.run("INSERT OR REPLACE INTO upload_chunks(staging, session_id, offset, length) VALUES(?, ?, ?, ?)",
                         [staging, sessionID, offset, length])
    }

    /// Forgets the chunks of every session of `staging`, except `keepingSession`'s.
    func forgetChunks(staging: String, keepingSession: String? = nil) throws(SQLiteError) {
        try database.run("DELETE FROM upload_chunks WHERE staging = ? AND session_id IS NOT ?", [staging, keepingSession])
    }

    /// Chunks of files that never got a row (streamed, then the process died before close).
    func forgetOrphanChunks() throws(SQLiteError) {
        try database.run("DELETE FROM upload_chunks WHERE staging NOT IN (SELECT staging FROM uploads)")
    }

    // MARK: Conflicts and generations

    func recordConflict(path: String, copyPath: String, at: Date) throws(SQLiteError) {
        try database.run("INSERT INTO conflicts(path, copy_path, at) VALUES(?, ?, ?)", [path, copyPath, at])
        // Keep the history short: status shows recent conflicts, the log keeps all of them.
        try database.run("DELETE FROM conflicts WHERE id <= (SELECT MAX(id) FROM conflicts) - 1000")
    }

    func recentConflicts(limit: Int) throws(SQLiteError) -> [ConflictRecord] {
        try database.query("SELECT path, copy_path, at FROM conflicts ORDER BY id DESC LIMIT ?", [limit]).map {
            ConflictRecord(path: $0.text("path") ?? "", copyPath: $0.text("copy_path") ?? "", at: $0.date("at") ?? Date())
        }
    }

    /// The last generation handed out (generations only grow, across restarts too).
    func lastGeneration() throws(SQLiteError) -> UInt64 {
        let saved = try database.query("SELECT value FROM journal_meta WHERE key = 'generation'").first?.uint64("value") ?? 0
        let inRows = try database.query("SELECT MAX(generation) AS g FROM uploads").first?.uint64("g") ?? 0
        let inOperations = try database.query("SELECT MAX(sequence) AS g FROM namespace_ops").first?.uint64("g") ?? 0
        return max(saved, inRows, inOperations)
    }

    func saveGeneration(_ generation: UInt64) throws(SQLiteError) {
        try database.run("INSERT OR REPLACE INTO journal_meta(key, value) VALUES('generation', ?)", [generation])
    }

    private static func record(_ row: SQLiteRow) -> UploadRecord {
        UploadRecord(pathKey: row.text("path_key") ?? "", path: row.text("path") ?? "", staging: row.text("staging") ?? "",
                     base: row.text("base_rev").map { .revision($0) } ?? .newFile,
                     clientModified: row.date("client_modified"), contentHash: row.text("content_hash"),
                     size: row.uint64("size") ?? 0, generation: row.uint64("generation") ?? 0,
                     state: UploadState(rawValue: row.text("state") ?? "") ?? .pending,
                     sessionID: row.text("session_id"), sessionConcurrent: row.bool("session_concurrent"),
                     sessionClosed: row.bool("session_closed"), commitPath: row.text("commit_path"),
                     lastError: row.text("last_error"), attempts: row.int("attempts") ?? 0,
                     sentHashes: (row.text("sent_hashes") ?? "").split(separator: ",").map(String.init))
    }
}
