/// `DropboxRemoteStore`: the cache layer's `RemoteStore`, over the `DropboxRemote` client.
///
/// Two jobs besides forwarding calls:
/// - `--root`: paths going out get the mount root prefixed ("/a" → "/Root/a"); paths coming back
///   lose it again ("/root/a" → "/a"), so VFSCache only ever sees paths relative to the mount.
///   Entries outside the root (never expected) and the root folder itself (which a recursive
///   listing of a non-root folder includes) are dropped from listings.
/// - errors: the client's typed `DropboxError` becomes a `RemoteError`, in `remoteError(_:)`.
/// - what Dropbox allows: `sharing_info.read_only` and `is_downloadable` become the entry's
///   flags; a file that can neither be downloaded nor exported (no `export_info.export_as`) is
///   left out of listings, with one log line per file (docs/SEMANTICS.md).
/// - names no folder can hold (`.`, `..`, empty, with `/` or NUL: DropboxRemote/Model/EntryNames.swift)
///   never reach the cache layer, from listings, the change feed or a single lookup; each is
///   logged once.
/// The client does the retries (429, 5xx, transport, token refresh), so nothing is retried here.
import DropboxRemote
import Foundation
import Synchronization
import VFSCache

final class DropboxRemoteStore: RemoteStore {
    let client: DropboxClient
    /// The mount root as given ("" for the whole account), display case, no trailing slash.
    let root: String
    private let rootLower: String
    private let log: Logger?
    /// Ids of the files already logged as hidden (a relisting must not log them again).
    private let hiddenLogged = Mutex<Set<String>>([])
    /// Paths and names of the entries already logged as unusable (the feed repeats them). Shared
    /// by the process's stores: the FUSE side and the change feed see the same listings.
    private static let refusedLogged = Mutex<Set<String>>([])
    /// What to do when Dropbox stops accepting the mount's token (MountCredentials.mountedFix).
    let accessFix: String

    /// `rootLower` is the root's `path_lower` as Dropbox reported it: Dropbox lowercases (and
    /// composes, NFC) in its own way, and a root lowercased here would not match its paths, which
    /// would make every entry look outside the root (docs/SEMANTICS.md, "Names"). Without it
    /// (offline start) Swift's lowercasing stands in.
    init(client: DropboxClient, root: String, rootLower: String? = nil, log: Logger? = nil,
         accessFix: String = "run 'dbxfs auth'; the mount picks it up without a remount") {
        self.client = client
        self.root = root
        self.rootLower = rootLower ?? root.lowercased()
        self.log = log
        self.accessFix = accessFix
    }

    // MARK: Paths

    /// VFSCache path → Dropbox path.
    func outgoing(_ path: String) -> String { root + path }

    /// Dropbox path (lowercased) → VFSCache path, or nil when outside the root.
    func incomingLower(_ pathLower: String) -> String? {
        if rootLower.isEmpty { return pathLower }
        guard pathLower.hasPrefix(rootLower) else { return nil }
        let rest = pathLower.dropFirst(rootLower.count)
        guard rest.isEmpty || rest.hasPrefix("/") else { return nil }
        return String(rest)
    }

    /// Dropbox display path → VFSCache display path. The display case of the root's own
    /// components may differ from `--root`'s, so this drops as many components as the root has.
    func incomingDisplay(_ pathDisplay: String) -> String {
        if root.isEmpty { return pathDisplay }
        let rootComponents = root.split(separator: "/").count
        let components = pathDisplay.split(separator: "/", omittingEmptySubsequences: false).dropFirst()
        let rest = components.dropFirst(rootComponents)
        return rest.isEmpty ? "" : "/" + rest.joined(separator: "/")
    }

    func entry(_ metadata: Metadata) -> RemoteEntry? {
        guard metadata.unusableNameReason == nil, let lower = metadata.pathLower, let relativeLower = incomingLower(lower) else { return nil }
        let display = incomingDisplay(metadata.pathDisplay ?? lower)
        switch metadata {
        case .file(let f):
            var flags = Self.flags(f.sharingInfo)
            if !f.isDownloadable { flags.insert(.exportOnly) }
            return RemoteEntry(id: f.id, name: f.name, pathLower: relativeLower, pathDisplay: display,
                               kind: .file(size: f.size, rev: f.rev, contentHash: f.contentHash,
                                           clientModified: f.clientModified, serverModified: f.serverModified),
                               flags: flags)
        case .folder(let f):
            return RemoteEntry(id: f.id, name: f.name, pathLower: relativeLower, pathDisplay: display, kind: .folder,
                               flags: Self.flags(f.sharingInfo))
        case .deleted:
            return nil
        }
    }

    private static func flags(_ sharing: SharingInfo?) -> RemoteEntry.Flags {
        guard let sharing else { return [] }
        return sharing.readOnly ? [.shared, .readOnly] : [.shared]
    }

    /// A file Dropbox neither downloads nor exports (files.stone: export only works "whose
    /// ExportResult.file_metadata has ExportInfo.export_as populated"): nothing could read it, so
    /// it is not shown. Logged once per file.
    private func unreadable(_ metadata: Metadata) -> Bool {
        guard case .file(let f) = metadata, !f.isDownloadable, f.exportInfo?.exportAs == nil else { return false }
        let first = hiddenLogged.withLock { $0.insert(f.id).inserted }
        if first {
            log?.info("\(f.pathDisplay ?? f.name): not shown: Dropbox can neither download nor export this file")
        }
        return true
    }

    private func change(_ metadata: Metadata) -> RemoteChange? {
        if case .deleted(let d) = metadata {
            guard let lower = d.pathLower, let relative = incomingLower(lower), !relative.isEmpty else { return nil }
            return .deleted(pathLower: relative, pathDisplay: incomingDisplay(d.pathDisplay ?? lower))
        }
        guard !unreadable(metadata), let entry = entry(metadata), !entry.pathLower.isEmpty else { return nil }
        return .upsert(entry)
    }

    private func page(_ result: ListFolderResult) -> RemoteListPage {
        for refused in result.refused { logUnusable(name: refused.name, path: refused.path, reason: refused.reason) }
        return RemoteListPage(changes: result.entries.compactMap(change), cursor: result.cursor, hasMore: result.hasMore)
    }

    /// One warning per entry (by name and path) whose name no folder can hold.
    private func logUnusable(name: String, path: String, reason: String) {
        guard Self.refusedLogged.withLock({ $0.insert(path + "\u{0}" + name).inserted }) else { return }
        log?.warning("not shown: the server sent the name '\(Metadata.printable(name))' at '\(Metadata.printable(path))', which no folder can hold (\(reason))")
    }

    private func required(_ metadata: Metadata, _ path: String) throws(RemoteError) -> RemoteEntry {
        if let reason = metadata.unusableNameReason {
            logUnusable(name: metadata.name, path: metadata.pathDisplay ?? "", reason: reason)
            throw .other("\(path): the server answered with a name no folder can hold")
        }
        guard let entry = entry(metadata) else { throw .other("\(path): the server answered with a path outside the mount root") }
        return entry
    }

    // MARK: RemoteStore

    func metadata(path: String) throws(RemoteError) -> RemoteEntry? {
        let found: Metadata?
        do { found = try client.metadataIfExists(path: outgoing(path)) } catch { throw remoteError(error, path) }
        guard let found, !unreadable(found) else { return nil }
        if let reason = found.unusableNameReason {
            logUnusable(name: found.name, path: found.pathDisplay ?? path, reason: reason)
            return nil
        }
        return try required(found, path)
    }

    func listFolder(path: String, recursive: Bool, limit: Int?) throws(RemoteError) -> RemoteListPage {
        do { return page(try client.listFolder(path: outgoing(path), recursive: recursive, limit: limit)) }
        catch { throw remoteError(error, path) }
    }

    func listFolderContinue(cursor: String) throws(RemoteError) -> RemoteListPage {
        do { return page(try client.listFolderContinue(cursor: cursor)) } catch { throw remoteError(error, "listing changes") }
    }

    func latestCursor(path: String, recursive: Bool) throws(RemoteError) -> String {
        do { return try client.getLatestCursor(path: outgoing(path), recursive: recursive) }
        catch { throw remoteError(error, path) }
    }

    func longpoll(cursor: String, timeout: Int) throws(RemoteError) -> (changes: Bool, backoff: Int?) {
        do {
            let result = try client.longpoll(cursor: cursor, timeout: timeout)
            return (result.changes, result.backoff)
        } catch { throw remoteError(error, "waiting for changes") }
    }

    func download(path: String, rev: String?, range: Range<UInt64>?,
                  sink: (UnsafeRawBufferPointer) -> Bool) throws(RemoteError) {
        // By rev when known: a file replaced meanwhile must not serve new bytes under an old rev.
        let source = rev.map { "rev:\($0)" } ?? outgoing(path)
        do {
            try withoutActuallyEscaping(sink) { (sink) throws(DropboxError) in
                _ = try client.download(path: source, range: range, sink: sink)
            }
        } catch { throw remoteError(error, path) }
    }

    func upload(file: URL, length: UInt64, commit: RemoteCommit, progress: RemoteProgress?) throws(RemoteError) -> RemoteEntry {
        let cancel = CancelHandle()
        do {
            let metadata = try client.upload(commitInfo(commit), body: .file(file, offset: 0, length: length),
                                             contentHash: commit.contentHash,
                                             progress: bridge(progress, cancel), cancel: cancel)
            return try required(.file(metadata), commit.path)
        } catch let error as DropboxError { throw remoteError(error, commit.path) }
        catch let error as RemoteError { throw error }
        catch { throw .other("\(error)") }
    }

    func startSession(concurrent: Bool) throws(RemoteError) -> String {
        do { return try client.uploadSessionStart(type: concurrent ? .concurrent : .sequential) }
        catch { throw remoteError(error, "starting an upload session") }
    }

    func appendSession(id: String, file: URL, offset: UInt64, length: UInt64, close: Bool,
                       progress: RemoteProgress?) throws(RemoteError) {
        let cancel = CancelHandle()
        do {
            try client.uploadSessionAppend(sessionID: id, offset: offset, body: .file(file, offset: offset, length: length),
                                           close: close, progress: bridge(progress, cancel), cancel: cancel)
        } catch { throw remoteError(error, "an upload session") }
    }

    func appendSessionChecked(id: String, bytes: Data, offset: UInt64, contentHash: String) throws(RemoteError) {
        do {
            try client.uploadSessionAppend(sessionID: id, offset: offset, body: .data(bytes), contentHash: contentHash)
        } catch { throw remoteError(error, "an upload session") }
    }

    func uploadClosedSession(file: URL, length: UInt64, progress: RemoteProgress?) throws(RemoteError) -> String {
        let cancel = CancelHandle()
        do {
            return try client.uploadSessionStart(type: .sequential, close: true, body: .file(file, offset: 0, length: length),
                                                 progress: bridge(progress, cancel), cancel: cancel)
        } catch { throw remoteError(error, "(upload session)") }
    }

    func finishBatch(_ entries: [(session: RemoteUploadedSession, commit: RemoteCommit)])
        throws(RemoteError) -> [Result<RemoteEntry, RemoteError>] {
        let batch = entries.map {
            UploadSessionFinishEntry(sessionID: $0.session.sessionID, length: $0.session.length,
                                     commit: commitInfo($0.commit), fileContentHash: $0.commit.contentHash)
        }
        let results: [Result<FileMetadata, DropboxError>]
        do { results = try client.uploadSessionFinishBatch(batch) } catch { throw remoteError(error, "committing a batch of uploads") }
        return zip(results, entries).map { result, entry in
            switch result {
            case .success(let metadata):
                guard let remote = self.entry(.file(metadata)) else {
                    return .failure(.other("\(entry.commit.path): committed outside the mount root"))
                }
                return .success(remote)
            case .failure(let error):
                return .failure(self.remoteError(error, entry.commit.path))
            }
        }
    }

    func createFolder(path: String) throws(RemoteError) -> RemoteEntry {
        do { return try required(.folder(try client.createFolder(path: outgoing(path))), path) }
        catch let error as DropboxError { throw remoteError(error, path) }
        catch let error as RemoteError { throw error }
        catch { throw .other("\(error)") }
    }

    func delete(path: String) throws(RemoteError) {
        do { _ = try client.delete(path: outgoing(path)) } catch { throw remoteError(error, path) }
    }

    func move(from: String, to: String) throws(RemoteError) -> RemoteEntry {
        let moved: Metadata
        do { moved = try client.move(from: outgoing(from), to: outgoing(to)) } catch { throw remoteError(error, from) }
        return try required(moved, to)
    }

    func copy(from: String, to: String) throws(RemoteError) -> RemoteEntry {
        let copied: Metadata
        do { copied = try client.copy(from: outgoing(from), to: outgoing(to)) } catch { throw remoteError(error, from) }
        return try required(copied, to)
    }

    func createFolders(_ paths: [String]) throws(RemoteError) -> [Result<RemoteEntry, RemoteError>] {
        let results: [Result<FolderMetadata, DropboxError>]
        do { results = try client.createFolderBatch(paths: paths.map(outgoing)) } catch { throw remoteError(error, "(create_folder_batch)") }
        return zip(results, paths).map { result, path in
            switch result {
            case .success(let folder):
                do throws(RemoteError) { return .success(try required(.folder(folder), path)) } catch { return .failure(error) }
            case .failure(let error): return .failure(remoteError(error, path))
            }
        }
    }

    func deleteBatch(_ entries: [RemoteDelete]) throws(RemoteError) -> [RemoteError?] {
        let results: [Result<Metadata, DropboxError>]
        do {
            results = try client.deleteBatch(entries.map { DeleteArg(path: outgoing($0.path), parentRev: $0.parentRev) })
        } catch { throw remoteError(error, "(delete_batch)") }
        return zip(results, entries).map { result, entry in
            if case .failure(let error) = result { return remoteError(error, entry.path) }
            return nil
        }
    }

    func moveBatch(_ entries: [RemoteMove]) throws(RemoteError) -> [Result<RemoteEntry, RemoteError>] {
        let results: [Result<Metadata, DropboxError>]
        do {
            results = try client.moveBatch(entries.map { RelocationPath(from: outgoing($0.from), to: outgoing($0.to)) })
        } catch { throw remoteError(error, "(move_batch_v2)") }
        return zip(results, entries).map { result, entry in
            switch result {
            case .success(let moved):
                do throws(RemoteError) { return .success(try required(moved, entry.to)) } catch { return .failure(error) }
            case .failure(let error): return .failure(remoteError(error, entry.from))
            }
        }
    }

    func spaceUsage() throws(RemoteError) -> (used: UInt64, allocated: UInt64) {
        do {
            // A team member's df shows the team's (or their own limit's) free space, not the
            // team allocation less the member's own bytes.
            let filesystem = try client.spaceUsage().filesystem
            return (filesystem.used, filesystem.size)
        } catch { throw remoteError(error, "the space usage") }
    }

    func export(path: String) throws(RemoteError) -> ExportedFile {
        // Ids ("id:...") are namespace-wide; only paths get the mount root.
        let source = path.hasPrefix("id:") ? path : outgoing(path)
        do {
            let result = try client.export(path: source)
            return ExportedFile(data: [UInt8](result.data), rev: result.file.rev)
        } catch { throw remoteError(error, path) }
    }

    // MARK: Helpers

    private func commitInfo(_ commit: RemoteCommit) -> CommitInfo {
        let mode: WriteMode = switch commit.mode {
        case .add: .add
        case .overwrite: .overwrite
        case .update(let rev): .update(rev: rev)
        }
        // strict_conflict: an `update` whose rev is stale must conflict even if the bytes match.
        return CommitInfo(path: outgoing(commit.path), mode: mode, autorename: false,
                          clientModified: commit.clientModified, mute: false, strictConflict: true)
    }

    /// The cache layer's progress can cancel; the client's cannot, so cancel through a handle.
    private func bridge(_ progress: RemoteProgress?, _ cancel: CancelHandle) -> DropboxRemote.TransferProgress? {
        guard let progress else { return nil }
        return { done, total in if !progress(done, total) { cancel.cancel() } }
    }

    /// The one mapping from the client's errors to the cache layer's. `path` names the file (or,
    /// for calls about no one file, what the call was doing) in the sentences that end up in the
    /// log, `dbxfs status` and `dbxfs sync` (RemoteError+Description.swift renders the rest).
    func remoteError(_ error: DropboxError, _ path: String) -> RemoteError {
        let subject = path.isEmpty ? "/" : path
        // The client of a mount's reads is cancelled when the mount starts to stop (MountBackend).
        if case .cancelled = error, client.configuration.stop?.isCancelled == true { return .other("the mount is stopping") }
        switch error {
        case .route(let route, let summary):
            switch route {
            case .reset: return .cursorReset
            case .uploadSession(.notFound), .uploadSession(.closed): return .sessionGone(summary)
            case .path(let lookup), .pathLookup(let lookup), .fromLookup(let lookup):
                return lookupError(lookup, path)
            case .pathWrite(let write), .pathWriteOnDelete(let write), .fromWrite(let write), .to(let write):
                return writeError(write, path)
            case .other(let tag):
                switch tag {
                case "too_many_write_operations": return .rateLimited(retryAfter: 1)
                case "too_many_files":
                    return .tooManyFiles("\(subject): more than 10,000 files and folders for one move or copy (too_many_files)")
                case "insufficient_quota": return .insufficientSpace
                default:
                    if let refusal = Self.refusals[tag] { return .invalidOperation("\(subject): \(refusal) (\(tag))") }
                    return .other("\(subject): \(error)")
                }
            case .uploadSession, .settingsError: return .other("\(subject): \(error)")
            }
        case .auth(.missingScope(let scope), _):
            return .auth("\(subject): the app lacks the permission \(scope ?? "this call needs") (missing_scope): tick it on the "
                         + "app's Permissions tab at https://www.dropbox.com/developers/apps, then link again (dbxfs auth)")
        case .auth(let reason, _):
            return .auth(ConnectionMonitor.refusal(reason, fix: accessFix))
        case .accessDenied(let tag, _): return .auth("\(subject): Dropbox denied access (\(tag))")
        case .rateLimited(_, let retryAfter): return .rateLimited(retryAfter: retryAfter)
        case .server, .transport: return .unavailable("\(error)")
        case .cancelled: return .cancelled
        case .badInput, .unexpectedResponse, .localIO: return .other("\(subject): \(error)")
        case .contentChanged: return .conflict(path)
        }
    }

    /// What Dropbox refuses to do, by its tag (files.stone RelocationError and friends).
    private static let refusals: [String: String] = [
        "cant_move_folder_into_itself": "Dropbox cannot move a folder into itself",
        "cant_copy_shared_folder": "Dropbox cannot copy a shared folder",
        "cant_nest_shared_folder": "Dropbox cannot put a shared folder inside another shared folder",
        "cant_move_shared_folder": "Dropbox cannot move this shared folder",
        "cant_move_into_vault": "Dropbox cannot move items into the Vault",
        "cant_move_into_family": "Dropbox cannot move items into the Family folder",
        "duplicated_or_nested_paths": "Dropbox refuses duplicated or nested paths in one request",
    ]

    private func lookupError(_ error: LookupError, _ path: String) -> RemoteError {
        let subject = path.isEmpty ? "/" : path
        return switch error {
        case .notFound: .notFound(path)
        case .notFile: .notFile(path)
        case .notFolder: .notFolder(path)
        case .malformedPath: .malformedPath(path)
        case .restrictedContent: .restrictedContent("\(subject): \(error)")
        case .locked: .locked("\(subject): \(error)")
        case .unsupportedContentType, .other: .other("\(subject): \(error)")
        }
    }

    private func writeError(_ error: WriteError, _ path: String) -> RemoteError {
        let subject = path.isEmpty ? "/" : path
        return switch error {
        case .conflict(.fileAncestor): .notFolder(path)
        case .conflict: .conflict(path)
        case .insufficientSpace: .insufficientSpace
        case .disallowedName: .disallowedName(path)
        case .malformedPath: .malformedPath(path)
        case .tooManyWriteOperations: .rateLimited(retryAfter: 1)
        case .noWritePermission: .permissionDenied("\(subject): Dropbox refuses writes there: no write permission in a read-only shared folder")
        case .teamFolder, .accessRestricted: .auth("\(subject): Dropbox refuses writes there: \(error)")
        case .operationSuppressed, .other: .other("\(subject): \(error)")
        }
    }
}
