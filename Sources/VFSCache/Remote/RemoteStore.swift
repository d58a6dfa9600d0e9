/// The remote as VFSCache sees it: a protocol, so the cache layer has no HTTP in it and unit tests
/// can run against an in-memory fake (`InMemoryRemote`) or a failure-injecting wrapper.
///
/// The production conformer lives in the `dbxfs` target (`DropboxRemoteStore`) and adapts the
/// `DropboxRemote` client. Every method is synchronous and may block: VFSCache calls it from FUSE
/// worker threads and from its own background threads, never from Swift's cooperative pool.
///
/// Paths are Dropbox paths relative to the account (or app folder): "" is the root, otherwise
/// "/a/b" with the display case the caller wants. The mount's `--root` is applied by the adapter,
/// so VFSCache always works with paths relative to the mount root.
import Foundation

/// One file or folder as the remote reports it.
public struct RemoteEntry: Sendable, Equatable {
    public enum Kind: Sendable, Equatable {
        case file(size: UInt64, rev: String, contentHash: String?, clientModified: Date, serverModified: Date)
        case folder
    }
    /// Stable id ("id:..."), kept across moves.
    public var id: String
    /// Last path component, in display case.
    public var name: String
    /// Full path relative to the mount root, lowercased ("" for the root itself).
    public var pathLower: String
    /// Full path relative to the mount root, display case.
    public var pathDisplay: String
    public var kind: Kind
    /// What Dropbox allows with the entry beyond reading it (docs/SEMANTICS.md, "Shared folders"
    /// and "Files Dropbox cannot download").
    public var flags: Flags

    /// Rare properties of an entry; a set of bits so a node carries them at no cost.
    public struct Flags: OptionSet, Sendable, Hashable {
        public let rawValue: UInt8
        public init(rawValue: UInt8) { self.rawValue = rawValue }
        /// The entry carries Dropbox's sharing_info (it is in a shared folder, or is one): its own
        /// `readOnly` decides. Entries without it inherit read-only from their folder.
        public static let shared = Flags(rawValue: 1 << 0)
        /// Inside a read-only shared folder: Dropbox refuses every write (no_write_permission).
        public static let readOnly = Flags(rawValue: 1 << 1)
        /// Not downloadable (a Paper doc, a Google Doc, a .web shortcut): read through `export`
        /// in the format Dropbox names, never written.
        public static let exportOnly = Flags(rawValue: 1 << 2)
    }

    public init(id: String, name: String, pathLower: String, pathDisplay: String, kind: Kind, flags: Flags = []) {
        self.id = id; self.name = name; self.pathLower = pathLower; self.pathDisplay = pathDisplay; self.kind = kind
        self.flags = flags
    }

    public var isFolder: Bool { if case .folder = kind { return true } else { return false } }
    public var rev: String? { if case .file(_, let rev, _, _, _) = kind { return rev } else { return nil } }
    public var size: UInt64 { if case .file(let size, _, _, _, _) = kind { return size } else { return 0 } }
    public var contentHash: String? { if case .file(_, _, let h, _, _) = kind { return h } else { return nil } }
}

/// One entry of a listing or of a change feed.
public enum RemoteChange: Sendable, Equatable {
    case upsert(RemoteEntry)
    /// Something at this path (lowercased, relative to the mount root) is gone, with its subtree.
    case deleted(pathLower: String, pathDisplay: String)
}

extension Array where Element == RemoteChange {
    /// The entries this batch adds or updates (a recursive listing is made of these only).
    var upserts: [RemoteEntry] {
        compactMap { if case .upsert(let entry) = $0 { entry } else { nil } }
    }
}

/// One page of `list_folder` / `list_folder/continue`.
public struct RemoteListPage: Sendable {
    public var changes: [RemoteChange]
    public var cursor: String
    public var hasMore: Bool
    public init(changes: [RemoteChange], cursor: String, hasMore: Bool) {
        self.changes = changes; self.cursor = cursor; self.hasMore = hasMore
    }
}

/// How a commit treats an existing file at the target path.
public enum RemoteWriteMode: Sendable, Equatable {
    /// Fail with `.conflict` if anything is there.
    case add
    /// Replace whatever file is there.
    case overwrite
    /// Replace only if the current rev is this one, else `.conflict`.
    case update(rev: String)
}

/// What a commit needs besides the bytes.
public struct RemoteCommit: Sendable, Equatable {
    public var path: String
    public var mode: RemoteWriteMode
    public var clientModified: Date?
    /// Content hash of the whole file. Dropbox checks it against the body of `upload` only, not
    /// against a session's bytes at finish (files.stone `UploadSessionFinishArg.content_hash`
    /// covers the finish call's own body): the engine compares the hash Dropbox answers.
    public var contentHash: String?
    public init(path: String, mode: RemoteWriteMode, clientModified: Date? = nil, contentHash: String? = nil) {
        self.path = path; self.mode = mode; self.clientModified = clientModified; self.contentHash = contentHash
    }
}

/// A finished (closed) upload session, ready to be committed, alone or in a batch.
public struct RemoteUploadedSession: Sendable, Equatable, Codable {
    public var sessionID: String
    public var length: UInt64
    public init(sessionID: String, length: UInt64) { self.sessionID = sessionID; self.length = length }
}

/// Progress of one transfer; `done` only grows. Returning false cancels the transfer.
public typealias RemoteProgress = @Sendable (_ done: UInt64, _ total: UInt64) -> Bool

/// Failures, already classified; the remote adapter has done its retries before throwing these.
/// Payloads: `notFound`, `notFolder`, `notFile`, `conflict`, `disallowedName` and `malformedPath`
/// carry the path they are about; the other cases with text carry a sentence for people, naming
/// the path where there is one. Rendered in RemoteError+Description.swift, never as the enum.
public enum RemoteError: Error, Sendable, Equatable {
    case notFound(String)
    case notFolder(String)
    case notFile(String)
    /// Something else is at the target, or the rev given to `update` is stale.
    case conflict(String)
    case insufficientSpace
    case disallowedName(String)
    case malformedPath(String)
    /// A folder cannot be moved into itself, a shared folder cannot be nested, ...
    case invalidOperation(String)
    /// Dropbox will not hand out this file's content (legal reasons: `restricted_content`).
    case restrictedContent(String)
    /// The file is locked on Dropbox (`locked`): someone holds its lock.
    case locked(String)
    /// A move or copy would involve more than Dropbox's 10,000 entries (`too_many_files`).
    case tooManyFiles(String)
    /// The change cursor is no longer valid: relist from scratch.
    case cursorReset
    /// An upload session expired or is unknown on the server: upload again from the start.
    case sessionGone(String)
    /// Token missing, revoked or expired past refresh.
    case auth(String)
    /// Dropbox refuses to write there (no_write_permission: a read-only shared folder). Unlike
    /// `auth`, time does not fix it: the write-back engine keeps the bytes and stops retrying.
    case permissionDenied(String)
    /// Still rate limited after the retry budget.
    case rateLimited(retryAfter: Double)
    /// 5xx or transport failure after the retry budget: the network or the server is down.
    case unavailable(String)
    case cancelled
    case other(String)
}

/// The remote operations VFSCache needs. Conformers do their own retries (429, 5xx, transport)
/// and throw `RemoteError` only once those are exhausted.
public protocol RemoteStore: Sendable {
    /// The entry at `path`, or nil if nothing is there. `path` may not be "" (the root).
    func metadata(path: String) throws(RemoteError) -> RemoteEntry?

    /// First page of a listing of `path` ("" = mount root). With `recursive`, the whole subtree,
    /// parents before children. `limit` is a hint for the page size.
    func listFolder(path: String, recursive: Bool, limit: Int?) throws(RemoteError) -> RemoteListPage
    /// Next page, or the changes since the cursor once a listing is exhausted.
    func listFolderContinue(cursor: String) throws(RemoteError) -> RemoteListPage
    /// A cursor at "now" for a recursive listing of `path`, without listing.
    func latestCursor(path: String, recursive: Bool) throws(RemoteError) -> String
    /// Blocks up to `timeout` seconds until the cursor is stale. Returns whether there are changes
    /// and how many seconds the server asks us to wait before polling again.
    func longpoll(cursor: String, timeout: Int) throws(RemoteError) -> (changes: Bool, backoff: Int?)

    /// Streams bytes `range` of the file at `rev` (by path or id) into `sink`, in order.
    /// `sink` returning false cancels. Resumes internally after transport errors.
    func download(path: String, rev: String?, range: Range<UInt64>?,
                  sink: (UnsafeRawBufferPointer) -> Bool) throws(RemoteError)

    /// Uploads a whole file (read from `file`, bytes 0..<length) in one request and commits it.
    func upload(file: URL, length: UInt64, commit: RemoteCommit, progress: RemoteProgress?) throws(RemoteError) -> RemoteEntry

    /// Starts an upload session; `concurrent` sessions accept appends in parallel.
    func startSession(concurrent: Bool) throws(RemoteError) -> String
    /// Appends bytes [offset, offset+length) of `file` to the session. `close` marks the last append.
    func appendSession(id: String, file: URL, offset: UInt64, length: UInt64, close: Bool,
                       progress: RemoteProgress?) throws(RemoteError)
    /// Appends `bytes` (read into memory by the caller) at `offset`, with their content hash:
    /// Dropbox refuses them (`content_hash_mismatch`) if it received other bytes, so the caller
    /// knows exactly what the session holds (files.stone `UploadSessionAppendArg.content_hash`).
    func appendSessionChecked(id: String, bytes: Data, offset: UInt64, contentHash: String) throws(RemoteError)
    /// A whole small file in a sequential session, closed, ready for `finishBatch`: with Dropbox
    /// one `upload_session/start` carrying the bytes and `close: true`. Has a default
    /// implementation (start, then one closing append).
    func uploadClosedSession(file: URL, length: UInt64, progress: RemoteProgress?) throws(RemoteError) -> String
    /// Commits closed sessions together (finish_batch_v2); one result per entry, in order.
    func finishBatch(_ entries: [(session: RemoteUploadedSession, commit: RemoteCommit)])
        throws(RemoteError) -> [Result<RemoteEntry, RemoteError>]

    func createFolder(path: String) throws(RemoteError) -> RemoteEntry
    /// Deletes the file or folder (recursively, on the server). VFSCache only ever passes empty
    /// folders, so `rmdir` never becomes a recursive delete.
    func delete(path: String) throws(RemoteError)
    func move(from: String, to: String) throws(RemoteError) -> RemoteEntry
    func copy(from: String, to: String) throws(RemoteError) -> RemoteEntry

    /// Namespace changes in batches (the write-back engine's namespace queue). One result per
    /// entry, in order; a thrown error means no entry's outcome is known. Each has a default
    /// implementation that makes the single calls one by one (for test fakes).
    /// Creates the folders (and missing parents); a folder already there is `.conflict`.
    func createFolders(_ paths: [String]) throws(RemoteError) -> [Result<RemoteEntry, RemoteError>]
    /// Deletes the entries; one with `parentRev` (files only) is refused with `.conflict` unless
    /// the file is still at that rev. nil: deleted.
    func deleteBatch(_ entries: [RemoteDelete]) throws(RemoteError) -> [RemoteError?]
    /// Moves the entries (parents of the targets are created).
    func moveBatch(_ entries: [RemoteMove]) throws(RemoteError) -> [Result<RemoteEntry, RemoteError>]

    /// Bytes used and allocated on the account.
    func spaceUsage() throws(RemoteError) -> (used: UInt64, allocated: UInt64)

    /// The content of an `exportOnly` file (by path or id), in its default export format.
    /// Has a default implementation that throws `.other` (a remote without exports).
    func export(path: String) throws(RemoteError) -> ExportedFile

    /// The URL of the shared link to the item at `path` itself (not one of a folder it is in),
    /// or nil when it has none (the `user.dropbox.shared_link` attribute: SharedLinks.swift).
    /// Has a default implementation: no links.
    func sharedLink(path: String) throws(RemoteError) -> String?
}

/// One delete of `deleteBatch`: `parentRev` makes it conditional on the file's rev.
public struct RemoteDelete: Sendable, Equatable {
    public var path: String
    public var parentRev: String?
    public init(path: String, parentRev: String? = nil) { self.path = path; self.parentRev = parentRev }
}

/// One move of `moveBatch`.
public struct RemoteMove: Sendable, Equatable {
    public var from: String
    public var to: String
    public init(from: String, to: String) { self.from = from; self.to = to }
}

/// What `export` gives: the bytes, and the rev of the file they were made from.
public struct ExportedFile: Sendable, Equatable {
    public var data: [UInt8]
    public var rev: String
    public init(data: [UInt8], rev: String) { self.data = data; self.rev = rev }
}

extension RemoteStore {
    public func uploadClosedSession(file: URL, length: UInt64, progress: RemoteProgress?) throws(RemoteError) -> String {
        let id = try startSession(concurrent: false)
        try appendSession(id: id, file: file, offset: 0, length: length, close: true, progress: progress)
        return id
    }

    public func export(path: String) throws(RemoteError) -> ExportedFile {
        throw .other("\(path): this remote cannot export files")
    }

    public func createFolders(_ paths: [String]) throws(RemoteError) -> [Result<RemoteEntry, RemoteError>] {
        paths.map { path in Result { () throws(RemoteError) in try createFolder(path: path) } }
    }

    /// One by one; `parentRev` is checked with a metadata call first (not atomic: for fakes).
    public func deleteBatch(_ entries: [RemoteDelete]) throws(RemoteError) -> [RemoteError?] {
        entries.map { entry in
            do throws(RemoteError) {
                if let rev = entry.parentRev {
                    let current = try metadata(path: entry.path)
                    if let current, current.isFolder || current.rev != rev { throw .conflict("\(entry.path): not at rev \(rev)") }
                }
                try delete(path: entry.path)
                return nil
            } catch {
                return error
            }
        }
    }

    public func moveBatch(_ entries: [RemoteMove]) throws(RemoteError) -> [Result<RemoteEntry, RemoteError>] {
        entries.map { entry in Result { () throws(RemoteError) in try move(from: entry.from, to: entry.to) } }
    }
    public func sharedLink(path: String) throws(RemoteError) -> String? { nil }
}
