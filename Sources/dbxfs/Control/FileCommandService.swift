/// The daemon's side of the file commands (`dbxfs history`, `cat`, `restore`, `undelete`,
/// `trash`, `share`, and `pin`/`unpin` in FileCommandService+Pins.swift): each takes a path relative to the mount root, asks Dropbox through a client
/// of its own, and answers one report (FileCommandReports.swift), or for `cat` a header and the
/// revision's bytes. Restores go through the VFS, so the mount shows them at once
/// (FileCommandService+Restore.swift).
///
/// Why its own client: a person (or a script) waits at the terminal, so a dead network must fail
/// in seconds, not after the mount's full retry budget. It gives up after three attempts and a
/// 5 s connect timeout, and an offline mount (the change watcher's view) answers at once.
///
/// Every failure is a sentence that names the path as the user typed it on the mount (the
/// mountpoint plus the relative path) and says what to do.
import DropboxRemote
import Foundation
import VFSCache

final class FileCommandService: Sendable {
    static let commands: Set<String> = ["history", "cat", "restore", "undelete", "trash", "share", "pin", "unpin", "pins"]

    /// Paths mapped to and from the mount root; its client is the fail-fast one.
    let store: DropboxRemoteStore
    /// nil for a mount that serves no Dropbox files (the in-memory backend of the tests).
    let vfs: VFS?
    let offline: OfflineState
    /// The kernel's caches: a restore names what the kernel must forget.
    let sink: any CacheInvalidationSink
    let logger: Logger
    /// The files kept offline (`dbxfs pin`; FileCommandService+Pins.swift); nil without a VFS.
    let pinned: PinnedFiles?

    init(store: DropboxRemoteStore, vfs: VFS?, offline: OfflineState, sink: any CacheInvalidationSink, logger: Logger,
         pinned: PinnedFiles? = nil) {
        self.store = store; self.vfs = vfs; self.offline = offline; self.sink = sink; self.logger = logger
        self.pinned = pinned
    }

    /// A failure, already phrased for the user.
    struct Failure: Error { var message: String }

    /// Answers one request on `client` (the control server's connection), then returns.
    func serve(_ request: ControlRequest, mountpoint: String, client: Int32) {
        guard let file = request.file, file.path.isEmpty || (file.path.hasPrefix("/") && !file.path.contains("\0")) else {
            reply(client, ControlErrorReply(error: "the request names no path on the mount"))
            return
        }
        let shown = mountpoint == "/" ? (file.path.isEmpty ? "/" : file.path) : mountpoint + file.path
        do throws(Failure) {
            try waitForQueuedChanges(at: file.path, shown: shown)
            switch request.command {
            case "history": reply(client, try history(file, shown: shown))
            case "cat": try cat(file, shown: shown, client: client)
            case "restore": reply(client, try restore(file, shown: shown, mountpoint: mountpoint))
            case "undelete": reply(client, try undelete(file, shown: shown, mountpoint: mountpoint))
            case "trash": reply(client, try trash(file, shown: shown, mountpoint: mountpoint))
            case "share": reply(client, try share(file, shown: shown))
            case "pin": reply(client, try pin(file, shown: shown, mountpoint: mountpoint))
            case "unpin": reply(client, try unpin(file, shown: shown, mountpoint: mountpoint))
            case "pins": reply(client, try pinList(mountpoint: mountpoint))
            default: reply(client, ControlErrorReply(error: "unknown command '\(request.command)'"))
            }
        } catch {
            logger.info("\(request.command) \(shown): \(error.message)")
            reply(client, ControlErrorReply(error: error.message))
        }
    }

    private func reply<T: Encodable>(_ client: Int32, _ value: T) {
        guard let data = try? ReportCoding.encoder().encode(value) else { return }
        try? UnixSocket.writeAll(client, data + Data("\n".utf8))
    }

    // MARK: history

    private func history(_ file: FileRequest, shown: String) throws(Failure) -> HistoryReport {
        try requireOnline()
        let list = try revisions(of: file.path, shown: shown, mode: .path, limit: file.limit ?? 100)
        let revisions = list.entries.enumerated().map { index, entry in
            RevisionReport(rev: entry.rev, size: entry.size, serverModified: entry.serverModified,
                           clientModified: entry.clientModified, contentHash: entry.contentHash,
                           current: index == 0 && !list.isDeleted)
        }
        return HistoryReport(path: shown, deleted: list.isDeleted, deletedAt: list.serverDeleted, revisions: revisions,
                             hasMore: list.hasMore, pid: getpid())
    }

    /// list_revisions of the file at `path`, with its failures as sentences (`notFound`: the one
    /// for no file there, deleted or not).
    func revisions(of path: String, shown: String, mode: RevisionsMode, limit: Int,
                   notFound: String? = nil) throws(Failure) -> RevisionList {
        if path.isEmpty { throw Failure(message: "\(shown) is a folder: only files have revisions") }
        do throws(DropboxError) {
            return try store.client.listRevisions(path: store.outgoing(path), mode: mode, limit: limit)
        } catch .route(.path(.notFile), _) {
            throw Failure(message: "\(shown) is a folder: only files have revisions")
        } catch .route(.path(.notFound), _) {
            throw Failure(message: notFound ?? "Dropbox has no file at \(shown), nor a deleted one")
        } catch {
            throw describe(error, shown)
        }
    }

    /// The revision `rev` of the file at `path`: among the revisions at that path (a deleted
    /// file's too), or else among those of the file there now (which may have been renamed).
    func revision(_ rev: String, of path: String, shown: String) throws(Failure) -> (wanted: FileMetadata, list: RevisionList) {
        guard DropboxClient.isWellFormedRev(rev) else {
            throw Failure(message: "'\(rev)' is not a revision: revisions are 9 or more hex digits, as dbxfs history shows them")
        }
        let byPath = try revisions(of: path, shown: shown, mode: .path, limit: 100)
        if let hit = byPath.entries.first(where: { $0.rev == rev }) { return (hit, byPath) }
        if !byPath.isDeleted, let byID = try? store.client.listRevisions(path: store.outgoing(path), mode: .id, limit: 100),
           let hit = byID.entries.first(where: { $0.rev == rev }) {
            return (hit, byPath)
        }
        throw Failure(message: "Dropbox keeps no revision \(rev) of \(shown) (dbxfs history lists the revisions it keeps)")
    }

    // MARK: cat

    /// The header (so the client knows the size and hash to expect), then the revision's bytes
    /// straight from Dropbox. A download that breaks off leaves the stream short: the client
    /// reports it, and the log says why.
    private func cat(_ file: FileRequest, shown: String, client: Int32) throws(Failure) {
        try requireOnline()
        let rev = file.rev ?? ""
        let found = try revision(rev, of: file.path, shown: shown).wanted
        reply(client, CatHeader(path: shown, rev: rev, size: found.size, contentHash: found.contentHash, pid: getpid()))
        do throws(DropboxError) {
            _ = try store.client.download(path: "rev:\(rev)") { buffer in
                (try? UnixSocket.writeAll(client, Data(buffer))) != nil
            }
        } catch .cancelled {
            logger.info("cat \(shown) --rev \(rev): the reader went away")
        } catch {
            logger.warning("cat \(shown) --rev \(rev): the download broke off: \(describe(error, shown).message)")
        }
    }

    // MARK: trash

    /// What was deleted in the folder and below it: a recursive listing with deleted entries,
    /// then, for each deleted path that is not a folder, its last revision (one list_revisions
    /// call each: DeletedMetadata does not say file or folder, and has no size or time).
    private func trash(_ file: FileRequest, shown: String, mountpoint: String) throws(Failure) -> TrashReport {
        try requireOnline()
        var live = Set<String>()
        var deleted: [String: String] = [:]   // path_lower → path_display, Dropbox's paths
        do throws(DropboxError) {
            var page = try store.client.listFolder(path: store.outgoing(file.path), recursive: true, includeDeleted: true)
            while true {
                for entry in page.entries {
                    guard let lower = entry.pathLower else { continue }
                    if case .deleted = entry { deleted[lower] = entry.pathDisplay ?? lower } else { live.insert(lower) }
                }
                guard page.hasMore else { break }
                page = try store.client.listFolderContinue(cursor: page.cursor)
            }
        } catch .route(.path(.notFolder), _) {
            throw Failure(message: "\(shown) is a file: trash lists what was deleted in a folder (dbxfs history lists the revisions of a file)")
        } catch .route(.path(.notFound), _) {
            throw Failure(message: "Dropbox has no folder at \(shown)")
        } catch {
            throw describe(error, shown)
        }
        let gone = deleted.keys.filter { !live.contains($0) }.sorted()
        // A deleted path with deleted paths under it was a folder: no call for it.
        var folders = Set<String>()
        for lower in gone {
            var ancestor = Substring(lower)
            while let slash = ancestor.lastIndex(of: "/"), slash != ancestor.startIndex {
                ancestor = ancestor[..<slash]
                folders.insert(String(ancestor))
            }
        }
        var files: [DeletedFileReport] = []
        for lower in gone where !folders.contains(lower) {
            guard let relative = store.incomingLower(lower), !relative.isEmpty else { continue }
            let display = store.incomingDisplay(deleted[lower] ?? lower)
            let list: RevisionList
            do throws(DropboxError) {
                list = try store.client.listRevisions(path: store.outgoing(relative), mode: .path, limit: 1)
            } catch .route {
                continue   // an empty deleted folder, or nothing Dropbox keeps a revision of
            } catch {
                throw describe(error, shown)
            }
            guard list.isDeleted, let last = list.entries.first else { continue }
            files.append(DeletedFileReport(path: Self.onMount(display, mountpoint: mountpoint), deletedAt: list.serverDeleted,
                                           rev: last.rev, size: last.size, serverModified: last.serverModified))
        }
        return TrashReport(folder: shown, deleted: files, pid: getpid())
    }

    static func onMount(_ relative: String, mountpoint: String) -> String {
        mountpoint == "/" ? (relative.isEmpty ? "/" : relative) : mountpoint + relative
    }

    // MARK: share

    private func share(_ file: FileRequest, shown: String) throws(Failure) -> ShareReport {
        try requireOnline()
        if file.path.isEmpty && store.root.isEmpty {
            throw Failure(message: "the root of a Dropbox cannot be shared with a link: share a folder or file in it")
        }
        let link: SharedLink
        do throws(SharedLinkFailure) {
            link = try store.client.sharedLink(path: store.outgoing(file.path), expires: file.expires, password: file.password)
        } catch {
            throw Self.sentence(error, shown: shown, describe: { self.describe($0, shown) })
        }
        vfs?.noteSharedLink(path: file.path, url: link.url)
        return ShareReport(path: shown, url: link.url, expires: link.expires, passwordProtected: link.passwordProtected,
                           reused: link.reused, pid: getpid())
    }

    static func sentence(_ failure: SharedLinkFailure, shown: String, describe: (DropboxError) -> Failure) -> Failure {
        let message: String
        switch failure {
        case .path(.notFound):
            message = "Dropbox has no file or folder at \(shown) (a file written on the mount can be shared once it is uploaded: dbxfs sync waits for that)"
        case .path(let lookup):
            message = "Dropbox cannot share \(shown) (\(lookup))"
        case .emailNotVerified:
            message = "Dropbox makes shared links only for accounts with a verified email address: verify it on dropbox.com, then share again"
        case .settingsNotAuthorized:
            message = "this Dropbox account may not set an expiry or a password on a link (Dropbox Basic accounts cannot): share without --expires and --password"
        case .invalidSettings:
            message = "Dropbox refused the link's settings (an expiry in the past, or an empty password)"
        case .accessDenied:
            message = "Dropbox does not allow a shared link to \(shown) (the file is restricted, or links are banned for this account)"
        case .bannedMember:
            message = "Dropbox has banned this account from sharing links"
        case .tooManySharedFolders:
            message = "Dropbox refused: the account has too many shared folders"
        case .existsWithOtherSettings(let link):
            message = "\(shown) already has a shared link with other settings, \(link.url) (Dropbox keeps one link per item): change or delete it on dropbox.com to get one with these settings"
        case .call(let error):
            return describe(error)
        }
        return Failure(message: message)
    }

    // MARK: Failures

    /// How long a command waits for the mount's own queued changes at its path.
    static let queuedChangesWait: TimeInterval = 30

    /// mkdir, unlink, rmdir and rename return before Dropbox has them (docs/WRITEBACK.md,
    /// "Namespace operations"); a command about that path waits until it does, so `rm f; dbxfs
    /// trash .` lists f and `mkdir d; dbxfs share d` shares it. Offline (also once the mount finds
    /// out meanwhile) it says so rather than wait.
    func waitForQueuedChanges(at path: String, shown: String) throws(Failure) {
        guard let engine = vfs?.writeBack else { return }
        let deadline = Date().addingTimeInterval(Self.queuedChangesWait)
        while !engine.waitForNamespaceOperations(touching: [path], until: min(deadline, Date().addingTimeInterval(0.5))) {
            try requireOnline()
            // Its last attempt could not reach Dropbox: say so now (the mount itself goes
            // offline only once its change feed has failed for a while).
            if let why = engine.unreachableReason(forOperationsTouching: [path]) {
                throw Failure(message: "Dropbox cannot be reached (\(why)); try again once the network is back")
            }
            if Date() >= deadline {
                throw Failure(message: "changes made on the mount at \(shown) are not on Dropbox yet (dbxfs status lists them); try again after dbxfs sync")
            }
        }
    }

    func requireOnline() throws(Failure) {
        guard offline.isOffline else { return }
        throw Failure(message: "Dropbox cannot be reached (\(offline.reason ?? "the mount is offline")); try again once the network is back")
    }

    func describe(_ error: DropboxError, _ shown: String) -> Failure {
        Self.describe(store.remoteError(error, shown))
    }

    /// A remote failure as a sentence (the paths it names are the user's).
    static func describe(_ error: RemoteError) -> Failure {
        let message = switch error {
        case .unavailable(let why): "Dropbox cannot be reached (\(why)); try again once the network is back"
        case .rateLimited(let seconds): "Dropbox is rate limiting this app; try again in \(Int(seconds.rounded(.up))) s"
        case .auth(let why): "Dropbox refused the request: \(why)"
        case .permissionDenied(let why): "Dropbox refused: \(why)"
        case .insufficientSpace: "the Dropbox account is full: there is no room for the restored file"
        case .notFound(let path): "Dropbox has nothing at \(path)"
        case .notFile(let path): "\(path) is a folder: only files have revisions"
        case .locked(let why), .restrictedContent(let why), .invalidOperation(let why), .other(let why),
             .conflict(let why), .notFolder(let why), .disallowedName(let why), .malformedPath(let why),
             .tooManyFiles(let why), .sessionGone(let why):
            "Dropbox refused the request: \(why)"
        case .cursorReset: "Dropbox reset the listing; try again"
        case .cancelled: "the request was cancelled"
        }
        return Failure(message: message)
    }
}
