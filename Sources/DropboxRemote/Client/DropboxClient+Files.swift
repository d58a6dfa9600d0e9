/// Metadata, listing and namespace routes: get_metadata, list_folder (+continue, get_latest_cursor,
/// longpoll), create_folder_v2, delete_v2, move_v2, copy_v2 (their batches: DropboxClient+NamespaceBatches.swift).
///
/// Write routes here are retried like everything else; when a retry follows a failure after which
/// the server may have executed the first attempt, the tell-tale error of our own success
/// (create → folder conflict, delete → not found, move → source not found) is resolved by looking
/// at the target, so a retry never turns a success into an error nor performs a write twice.
import Foundation

extension DropboxClient {
    // MARK: Metadata and listing

    /// Metadata of a file or folder by path (`/a/b`), id (`id:...`) or revision (`rev:...`).
    public func getMetadata(path: String, includeDeleted: Bool = false) throws(DropboxError) -> Metadata {
        let arg: JSON = ["path": .string(path), "include_deleted": .bool(includeDeleted),
                         "include_media_info": false, "include_has_explicit_shared_members": false]
        return try Metadata(json: call(.rpc("files/get_metadata", errors: .lookup), arg: arg))
    }

    /// Like `getMetadata`, but nil when nothing is at `path`.
    public func metadataIfExists(path: String) throws(DropboxError) -> Metadata? {
        do {
            return try getMetadata(path: path)
        } catch .route(.path(.notFound), _) {
            return nil
        }
    }

    /// First page of a listing; `""` is the root. Call `listFolderContinue` while `hasMore`.
    public func listFolder(path: String, recursive: Bool = false, includeDeleted: Bool = false,
                           limit: Int? = nil) throws(DropboxError) -> ListFolderResult {
        try ListFolderResult(json: call(.rpc("files/list_folder", errors: .lookup),
                                        arg: listArg(path: path, recursive: recursive, includeDeleted: includeDeleted, limit: limit)))
    }

    /// Next page, or once the listing is exhausted, the changes since the cursor.
    public func listFolderContinue(cursor: String) throws(DropboxError) -> ListFolderResult {
        try ListFolderResult(json: call(.rpc("files/list_folder/continue", errors: .lookup), arg: ["cursor": .string(cursor)]))
    }

    /// Streams a whole listing page by page; `body` returns false to stop early.
    /// Returns the last cursor (for change tracking).
    @discardableResult
    public func listFolderPages(path: String, recursive: Bool = false, limit: Int? = nil,
                                _ body: (ListFolderResult) throws(DropboxError) -> Bool) throws(DropboxError) -> String {
        var page = try listFolder(path: path, recursive: recursive, limit: limit)
        while try body(page), page.hasMore {
            page = try listFolderContinue(cursor: page.cursor)
        }
        return page.cursor
    }

    /// A cursor at "now" for the listing described, without listing.
    public func getLatestCursor(path: String, recursive: Bool = false, includeDeleted: Bool = false) throws(DropboxError) -> String {
        let json = try call(.rpc("files/list_folder/get_latest_cursor", errors: .lookup),
                            arg: listArg(path: path, recursive: recursive, includeDeleted: includeDeleted, limit: nil))
        guard let cursor = json["cursor"]?.string else { throw .unexpectedResponse("get_latest_cursor without cursor") }
        return cursor
    }

    /// Waits (up to `timeout` s, 30...480, plus the server's jitter) until the cursor is stale.
    /// Sent to the notify host without Authorization, as the API requires.
    public func longpoll(cursor: String, timeout: Int = 30, cancel: CancelHandle? = nil) throws(DropboxError) -> LongpollResult {
        var route = Route(name: "files/list_folder/longpoll", host: .notify, style: .rpc, errors: .lookup)
        route.authenticated = false
        // Dropbox adds up to 90 s of jitter to the timeout; the request is silent until then.
        let json = try call(route, arg: ["cursor": .string(cursor), "timeout": .int(Int64(timeout))],
                            cancel: cancel, totalTimeout: timeout + 120)
        guard let changes = json["changes"]?.bool else { throw .unexpectedResponse("longpoll without changes") }
        return LongpollResult(changes: changes, backoff: json["backoff"]?.int64.map { Int($0) })
    }

    private func listArg(path: String, recursive: Bool, includeDeleted: Bool, limit: Int?) -> JSON {
        var arg: [String: JSON] = ["path": .string(path), "recursive": .bool(recursive), "include_deleted": .bool(includeDeleted),
                                   "include_media_info": false, "include_has_explicit_shared_members": false,
                                   "include_mounted_folders": true, "include_non_downloadable_files": true]
        if let limit { arg["limit"] = .int(Int64(limit)) }
        return .object(arg)
    }

    // MARK: Namespace changes

    public func createFolder(path: String, autorename: Bool = false) throws(DropboxError) -> FolderMetadata {
        let route = Route.rpc("files/create_folder_v2", errors: .write)
        return try withRetries(route: route) { (context) throws(DropboxError) -> FolderMetadata in
            do throws(DropboxError) {
                let json = try attempt(route, arg: ["path": .string(path), "autorename": .bool(autorename)], context: context)
                guard let metadata = json.result["metadata"] else { throw .unexpectedResponse("create_folder_v2 without metadata") }
                return try FolderMetadata(json: metadata)
            } catch .route(.pathWrite(.conflict(.folder)), let summary) where context.earlierAttemptMayHaveCommitted && !autorename {
                guard case .folder(let folder)? = try metadataIfExists(path: path) else {
                    throw .route(.pathWrite(.conflict(.folder)), summary: summary)
                }
                statistics.update { $0.ambiguousWritesResolved += 1 }
                return folder
            }
        }
    }

    /// Deletes a file or folder (recursively). Returns its metadata as it was before the delete;
    /// when a retried delete finds the earlier attempt already did it, a `.deleted` entry.
    @discardableResult
    public func delete(path: String, parentRev: String? = nil) throws(DropboxError) -> Metadata {
        let route = Route.rpc("files/delete_v2", errors: .delete)
        var arg: [String: JSON] = ["path": .string(path)]
        if let parentRev { arg["parent_rev"] = .string(parentRev) }
        return try withRetries(route: route) { [arg] (context) throws(DropboxError) -> Metadata in
            do throws(DropboxError) {
                let json = try attempt(route, arg: .object(arg), context: context)
                guard let metadata = json.result["metadata"] else { throw .unexpectedResponse("delete_v2 without metadata") }
                return try Metadata(json: metadata)
            } catch .route(.pathLookup(.notFound), _) where context.earlierAttemptMayHaveCommitted {
                statistics.update { $0.ambiguousWritesResolved += 1 }
                let name = String(path.split(separator: "/").last ?? "")
                return .deleted(DeletedMetadata(name: name, pathLower: path.lowercased(), pathDisplay: path))
            }
        }
    }

    /// Moves (renames) a file or folder; parents of `to` are created.
    public func move(from: String, to: String, autorename: Bool = false) throws(DropboxError) -> Metadata {
        try relocate("files/move_v2", from: from, to: to, autorename: autorename)
    }

    /// Copies a file or folder; the copy gets a new id.
    public func copy(from: String, to: String, autorename: Bool = false) throws(DropboxError) -> Metadata {
        try relocate("files/copy_v2", from: from, to: to, autorename: autorename)
    }

    private func relocate(_ name: String, from: String, to: String, autorename: Bool) throws(DropboxError) -> Metadata {
        let route = Route.rpc(name, errors: .relocation)
        let arg: JSON = ["from_path": .string(from), "to_path": .string(to), "autorename": .bool(autorename),
                         "allow_shared_folder": false, "allow_ownership_transfer": false]
        let isMove = name == "files/move_v2"
        return try withRetries(route: route) { (context) throws(DropboxError) -> Metadata in
            do throws(DropboxError) {
                let json = try attempt(route, arg: arg, context: context)
                guard let metadata = json.result["metadata"] else { throw .unexpectedResponse("\(name) without metadata") }
                return try Metadata(json: metadata)
            } catch let error where context.earlierAttemptMayHaveCommitted && !autorename {
                // Our earlier attempt may have moved the source away (move) or created the target
                // (copy, move). If the target exists, that attempt succeeded.
                switch error {
                case .route(.fromLookup(.notFound), _) where isMove, .route(.to(.conflict), _):
                    guard let target = try metadataIfExists(path: to) else { throw error }
                    statistics.update { $0.ambiguousWritesResolved += 1 }
                    return target
                default:
                    throw error
                }
            }
        }
    }
}
