/// The wire format of the file commands (`history`, `cat`, `restore`, `undelete`, `trash`,
/// `share`) on the control socket, which is also what their `--json` prints (docs/STATUS.md,
/// "File commands"). Same rules as the status format: snake_case keys, bytes, ISO 8601 UTC
/// times, optional fields omitted, fields only ever added.
///
/// Paths on the wire are relative to the mount root ("" for the root, else "/a/b"); answers also
/// carry `path` as the absolute path on the mount, which is what users see and type.
import Foundation

/// A file command's answer: the daemon names itself (ControlTrust); the commands print it without.
protocol FileCommandAnswer: Codable, ControlAnswer {
    var pid: Int32? { get set }
}

extension FileCommandAnswer {
    var daemonPID: Int32? { pid }
}

/// What a file command names (`ControlRequest.file`).
struct FileRequest: Codable, Sendable {
    /// Relative to the mount root: "" or "/a/b".
    var path: String
    var rev: String?
    /// share: the link's expiry.
    var expires: Date?
    /// share: the link's password.
    var password: String?
    /// history: at most this many revisions (1...100).
    var limit: Int?
}

/// One revision of a file (`dbxfs history`).
struct RevisionReport: Codable, Sendable {
    var rev: String
    var size: UInt64
    /// When Dropbox stored this revision.
    var serverModified: Date
    /// The modification time the writer gave it (what `ls -l` shows).
    var clientModified: Date
    var contentHash: String?
    /// The revision the file shows now (never on a deleted file).
    var current: Bool
}

/// `dbxfs history PATH`.
struct HistoryReport: FileCommandAnswer, Sendable {
    var path: String
    /// No file is at the path now: it was deleted (or moved away), at `deletedAt` when known.
    var deleted: Bool
    var deletedAt: Date?
    /// Newest first.
    var revisions: [RevisionReport]
    /// Dropbox keeps older revisions than these.
    var hasMore: Bool
    var pid: Int32?
}

/// `dbxfs restore PATH --rev REV` and `dbxfs undelete PATH`.
struct RestoreReport: FileCommandAnswer, Sendable {
    var path: String
    /// The revision asked for.
    var restoredRev: String
    /// The file's current revision now: a new one, or the same when nothing had to change.
    var rev: String
    /// The revision asked for was already the current content: nothing changed.
    var unchanged: Bool
    var size: UInt64
    var contentHash: String?
    var pid: Int32?
}

/// One deleted file (`dbxfs trash`).
struct DeletedFileReport: Codable, Sendable {
    var path: String
    var deletedAt: Date?
    /// Its last revision (what `undelete` brings back).
    var rev: String
    var size: UInt64
    var serverModified: Date
}

/// `dbxfs trash [FOLDER]`.
struct TrashReport: FileCommandAnswer, Sendable {
    var folder: String
    /// Path order.
    var deleted: [DeletedFileReport]
    var pid: Int32?
}

/// `dbxfs share PATH`.
struct ShareReport: FileCommandAnswer, Sendable {
    var path: String
    var url: String
    var expires: Date?
    var passwordProtected: Bool
    /// The link existed already (Dropbox keeps one link per file or folder).
    var reused: Bool
    var pid: Int32?
}

/// `dbxfs cat PATH --rev REV`: this header line, then exactly `size` bytes of the revision.
struct CatHeader: FileCommandAnswer, Sendable {
    var path: String
    var rev: String
    var size: UInt64
    /// Dropbox's content hash of the revision: the client checks the bytes it got against it.
    var contentHash: String?
    var pid: Int32?
}
