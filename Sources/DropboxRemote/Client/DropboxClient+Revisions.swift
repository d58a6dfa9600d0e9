/// A file's history: `files/list_revisions` (the revisions Dropbox keeps of a file, newest first,
/// and whether the file is deleted now) and `files/restore` (a revision becomes the current
/// version again, as a new revision). files.stone: `ListRevisionsArg`, `ListRevisionsMode`,
/// `ListRevisionsResult`, `ListRevisionsError`, `RestoreArg`, `RestoreError`.
///
/// Errors, as `DropboxError.route`: list_revisions `path` LookupError (`.path`, e.g. `not_file`
/// for a folder, `not_found`), `invalid_before_rev` and `before_rev_not_supported` (`.other`);
/// restore `path_lookup` LookupError and `path_write` WriteError (RestoreError has DeleteError's
/// two members, so it is read with that shape: `.pathLookup`, `.pathWriteOnDelete`),
/// `invalid_revision` ("It may not exist or may point to a deleted file") and `in_progress`
/// (`.other`).
import Foundation

/// files.stone `ListRevisionsMode`.
public enum RevisionsMode: String, Sendable {
    /// "all revisions at the same file path as the latest file entry": the only mode that works
    /// for a deleted file and takes `before_rev`.
    case path
    /// "revisions with the same file id": follows the file across moves and renames.
    case id
}

/// files.stone `ListRevisionsResult`.
public struct RevisionList: Sendable, Equatable {
    /// "If the file identified by the latest revision in the response is either deleted or moved."
    public var isDeleted: Bool
    /// When it was deleted, if it was.
    public var serverDeleted: Date?
    /// Newest first; "Only revisions that are not deleted will show up here."
    public var entries: [FileMetadata]
    /// More, older, revisions: ask again with `before_rev` = the last entry's rev.
    public var hasMore: Bool

    public init(json: JSON) throws(DropboxError) {
        guard let entries = json["entries"]?.array else { throw .unexpectedResponse("list_revisions without entries") }
        var decoded: [FileMetadata] = []
        for entry in entries { decoded.append(try FileMetadata(json: entry)) }
        self.entries = decoded
        isDeleted = json["is_deleted"]?.bool ?? false
        serverDeleted = json["server_deleted"]?.string.flatMap(DropboxTimestamp.parse)
        hasMore = json["has_more"]?.bool ?? false
    }
}

extension DropboxClient {
    /// files.stone `Rev`: at least 9 lowercase hex digits. Anything else is refused by Dropbox's
    /// argument validator with a 400, so callers check user input with this first.
    public static func isWellFormedRev(_ text: String) -> Bool {
        text.utf8.count >= 9 && text.utf8.allSatisfy { (48...57).contains($0) || (97...102).contains($0) }
    }

    /// Up to `limit` (1...100) revisions of the file at `path` (a path or `id:`), newest first;
    /// `beforeRev` (path mode only) continues after an earlier page's last entry.
    public func listRevisions(path: String, mode: RevisionsMode = .path, limit: Int = 10,
                              beforeRev: String? = nil) throws(DropboxError) -> RevisionList {
        var arg: [String: JSON] = ["path": .string(path), "mode": [".tag": .string(mode.rawValue)],
                                   "limit": .int(Int64(min(max(limit, 1), 100)))]
        if let beforeRev { arg["before_rev"] = .string(beforeRev) }
        return try RevisionList(json: call(.rpc("files/list_revisions", errors: .lookup), arg: .object(arg)))
    }

    /// Makes revision `rev` the current version of the file at `path` (restoring it there; a
    /// deleted file comes back). Returns the new revision's metadata.
    ///
    /// Retried like any call: a retry after an attempt that may have been executed restores the
    /// same bytes again, which Dropbox treats as an identical write.
    public func restore(path: String, rev: String) throws(DropboxError) -> FileMetadata {
        try FileMetadata(json: call(.rpc("files/restore", errors: .delete), arg: ["path": .string(path), "rev": .string(rev)]))
    }
}
