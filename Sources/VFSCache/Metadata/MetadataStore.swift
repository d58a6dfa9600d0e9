/// `MetadataStore`: the metadata tree and its change cursor, persisted in SQLite
/// (`<cache dir>/metadata.sqlite3`), so a remount shows the tree at once and an offline mount
/// has something to serve.
///
/// One row per file or folder, keyed by lowercased path; the cursor in `state`.
///
/// The invariant (docs/SEMANTICS.md, "Remounts"): the saved rows are exactly Dropbox's tree as of
/// the saved cursor, never older. It is kept here, in the only two ways the cursor can move:
/// - `replaceAll(listing, cursor:)`: a complete recursive listing and the cursor it ended with;
/// - `apply(changes, from:, to:)`: every change of the feed between the saved cursor `from` and
///   `to`, applied verbatim (including changes the in-memory tree set aside because local writes
///   are pending, and the echoes of the mount's own operations), in the same transaction as the
///   cursor. A batch whose `from` is not the saved cursor is refused (`CursorMismatch`): the
///   saved tree would then miss whatever lay between, so the caller forgets the saved tree instead.
/// The mount's own operations never write here: they reach the store through the feed, like
/// anyone else's. What is still uploading lives in the upload journal, not here.
///
/// The paths pinned with `dbxfs pin` live here too (table `pins`, PinnedFiles.swift): they are the
/// user's choice, not Dropbox's tree, so a schema change or a forgotten tree keeps them.
///
/// Durability: `synchronous=NORMAL` in WAL mode. A crash may lose the last batches, never
/// consistency; the feed from the older saved cursor brings them back.
import Foundation

public final class MetadataStore: Sendable {
    private let database: SQLiteDatabase
    public var path: String { database.path }

    /// Bumped when the schema changes: an older file is then emptied, not misread.
    /// 2: entries.flags (read-only, export-only).
    private static let schemaVersion = 2

    public init(directory: URL) throws(SQLiteError) {
        database = try SQLiteDatabase(path: directory.appendingPathComponent("metadata.sqlite3").path,
                                      options: SQLiteDatabase.Options(writeAheadLog: true, fullSync: false))
        try database.execute("CREATE TABLE IF NOT EXISTS state (key TEXT PRIMARY KEY, value TEXT NOT NULL);")
        let version = try database.query("SELECT value FROM state WHERE key = 'schema'").first?.text("value")
        if version != String(Self.schemaVersion) {
            // Another layout: start empty (the next mount lists the tree again).
            try database.execute("DROP TABLE IF EXISTS entries; DELETE FROM state;")
            try database.run("INSERT INTO state (key, value) VALUES ('schema', ?)", [String(Self.schemaVersion)])
        }
        try database.execute("""
            CREATE TABLE IF NOT EXISTS entries (
                path_lower TEXT PRIMARY KEY,
                path_display TEXT NOT NULL,
                id TEXT NOT NULL,
                folder INTEGER NOT NULL,
                size INTEGER NOT NULL DEFAULT 0,
                rev TEXT,
                content_hash TEXT,
                modified REAL NOT NULL DEFAULT 0,
                flags INTEGER NOT NULL DEFAULT 0
            ) WITHOUT ROWID;
            CREATE TABLE IF NOT EXISTS pins (path_lower TEXT PRIMARY KEY, path_display TEXT NOT NULL) WITHOUT ROWID;
            """)
    }

    // MARK: Pins

    /// The pinned paths (relative to the mount root, as the user's pin spelled them), in order.
    public func pinnedPaths() throws(SQLiteError) -> [String] {
        try database.query("SELECT path_display FROM pins ORDER BY path_lower").compactMap { $0.text("path_display") }
    }

    public func savePin(_ path: String) throws(SQLiteError) {
        try database.run("INSERT OR REPLACE INTO pins (path_lower, path_display) VALUES (?, ?)", [path.lowercased(), path])
    }

    public func deletePin(_ path: String) throws(SQLiteError) {
        try database.run("DELETE FROM pins WHERE path_lower = ?", [path.lowercased()])
    }

    public func close() { database.close() }

    /// The saved cursor; nil when nothing complete was ever saved.
    public func cursor() throws(SQLiteError) -> String? {
        try database.query("SELECT value FROM state WHERE key = 'cursor'").first?.text("value")
    }

    public func entryCount() throws(SQLiteError) -> Int {
        try database.query("SELECT count(*) AS n FROM entries").first?.int("n") ?? 0
    }

    /// Every saved entry, parents before children (a parent's path is a prefix of its children's,
    /// so it sorts first).
    public func loadEntries() throws(SQLiteError) -> [RemoteEntry] {
        var entries: [RemoteEntry] = []
        try database.forEachRow("SELECT * FROM entries ORDER BY path_lower") { row in
            let display = row.text("path_display") ?? ""
            let name = InodeTable.lastName(display)
            let kind: RemoteEntry.Kind
            if row.bool("folder") {
                kind = .folder
            } else {
                let modified = Date(timeIntervalSince1970: row.double("modified") ?? 0)
                kind = .file(size: row.uint64("size") ?? 0, rev: row.text("rev") ?? "", contentHash: row.text("content_hash"),
                             clientModified: modified, serverModified: modified)
            }
            entries.append(RemoteEntry(id: row.text("id") ?? "", name: name, pathLower: row.text("path_lower") ?? "",
                                       pathDisplay: display, kind: kind,
                                       flags: RemoteEntry.Flags(rawValue: UInt8(truncatingIfNeeded: row.int("flags") ?? 0))))
        }
        return entries
    }

    /// A feed batch that does not continue from the saved cursor.
    public struct CursorMismatch: Error, CustomStringConvertible {
        public let saved: String?
        public var description: String { saved == nil ? "no tree is saved" : "the saved cursor is not where this batch starts" }
    }

    /// Replaces everything with a complete recursive listing and the cursor it ended with.
    public func replaceAll(_ entries: [RemoteEntry], cursor: String) throws {
        try database.transaction {
            try database.run("DELETE FROM entries")
            for entry in entries { try insert(entry) }
            try setCursor(cursor)
        }
    }

    /// Applies one batch of the feed, every change of it, and moves the cursor from `from` to
    /// `to`, atomically. Throws `CursorMismatch` (and changes nothing) unless the saved cursor is
    /// `from`.
    public func apply(_ changes: [RemoteChange], from: String, to cursor: String) throws {
        try database.transaction {
            let saved = try self.cursor()
            guard saved == from else { throw CursorMismatch(saved: saved) }
            for change in changes {
                switch change {
                case .upsert(let entry):
                    // A folder replaced by a file (or the reverse) loses its old subtree.
                    if !entry.isFolder { try deleteSubtree(entry.pathDisplay.lowercased(), includingSelf: false) }
                    try insert(entry)
                case .deleted(_, let pathDisplay):
                    try deleteSubtree(pathDisplay.lowercased(), includingSelf: true)
                }
            }
            try setCursor(cursor)
        }
    }

    /// Forgets the tree (a cursor reset in a tree too big to hold whole).
    public func clear() throws(SQLiteError) {
        try database.execute("DELETE FROM entries; DELETE FROM state WHERE key = 'cursor';")
    }

    private func insert(_ entry: RemoteEntry) throws(SQLiteError) {
        var size: UInt64 = 0, rev: String?, hash: String?, modified = 0.0
        if case .file(let s, let r, let h, let clientModified, _) = entry.kind {
            size = s; rev = r; hash = h; modified = clientModified.timeIntervalSince1970
        }
        // Our own lowercasing of the display path, the same key the tree files names under.
        try database.run("""
            INSERT OR REPLACE INTO entries (path_lower, path_display, id, folder, size, rev, content_hash, modified, flags)
            VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
            """, [entry.pathDisplay.lowercased(), entry.pathDisplay, entry.id, entry.isFolder, size, rev, hash, modified,
                  Int(entry.flags.rawValue)])
    }

    private func deleteSubtree(_ pathLower: String, includingSelf: Bool) throws(SQLiteError) {
        // substr instead of LIKE: names may contain % and _.
        let prefix = pathLower + "/"
        try database.run("DELETE FROM entries WHERE substr(path_lower, 1, ?) = ?", [prefix.unicodeScalars.count, prefix])
        if includingSelf { try database.run("DELETE FROM entries WHERE path_lower = ?", [pathLower]) }
    }

    private func setCursor(_ cursor: String) throws(SQLiteError) {
        try database.run("INSERT OR REPLACE INTO state (key, value) VALUES ('cursor', ?)", [cursor])
    }
}
