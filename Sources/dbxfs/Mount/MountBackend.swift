/// What a mount serves: builds the `FilesystemOperations` the glue calls (the real `VFS` over
/// Dropbox, or the in-memory stand-in), and knows how to shut it down after unmount.
///
/// For Dropbox it first checks what can stop the mount, so each refusal is one line before
/// anything is mounted: a missing or rejected token, an unreachable server, a `--root` that is
/// not a folder, a cache directory another daemon holds (CacheDirectoryLock: taken here, before
/// anything in the cache directory is opened).
import ContentHash
import DropboxRemote
import Foundation
import VFSCache

struct MountBackend: CustomStringConvertible {
    struct Failure: Error, CustomStringConvertible { var description: String }

    let operations: any FilesystemOperations
    let description: String
    /// Where the daemon's stderr goes once detached (nil: nowhere).
    let logFile: String?
    let shutdown: () -> Void
    /// What `dbxfs status` and `dbxfs sync` ask (Control/MountStatusSource.swift).
    let statusSource: MountStatusSource
    /// The cache directory's lock, held until the process exits (nil: no cache directory).
    var cacheLock: CacheDirectoryLock?
    /// Starts the change watcher once the FUSE session exists (its kernel notifier is the sink).
    var startChangeWatcher: (any CacheInvalidationSink) -> Void = { _ in }

    /// `stillWanted` tells a `--wait-for-cache` wait whether anyone still waits for the mount.
    static func open(options: MountOptions, logger: Logger, stillWanted: () -> Bool = { true }) throws(Failure) -> MountBackend {
        switch options.backend {
        case .memory:
            let memory = MemoryFilesystem(uid: options.uid, gid: options.gid, umask: options.umask)
            return MountBackend(operations: memory, description: "an in-memory filesystem",
                                logFile: options.logFile, shutdown: {}, statusSource: .memory(readOnly: options.readOnly))
        case .dropbox:
            return try openDropbox(options: options, logger: logger, stillWanted: stillWanted)
        }
    }

    private static func openDropbox(options: MountOptions, logger: Logger, stillWanted: () -> Bool) throws(Failure) -> MountBackend {
        // A stored profile (dbxfs auth) refreshes its access token and saves each new one.
        let credentials: MountCredentials
        do {
            credentials = try MountCredentials.resolve(tokenFile: options.tokenFile, environmentToken: options.token,
                                                       profile: options.profile, logger: logger)
        } catch {
            throw Failure(description: error.description)
        }
        var options = options
        options.apiBase = options.apiBase ?? credentials.apiBase
        let endpoints = options.apiBase.map { Endpoints(overridingAllWith: $0) } ?? .dropbox
        let serverName = options.apiBase ?? "Dropbox"

        // The start-up check fails fast (two attempts, short connect timeout) so a wrong URL or a
        // dead network gives its one line within seconds rather than after the full retry budget.
        let checkConfiguration = ClientConfiguration(endpoints: endpoints, extraCAFile: options.caFile, connectTimeout: 5,
                                                     retryPolicy: RetryPolicy(maxAttempts: 2))
        let checker = DropboxClient(configuration: checkConfiguration, tokens: credentials.tokens)
        var account: OfflineStart.SavedAccount
        // Offline start (issue 7): Dropbox unreachable, but an earlier mount saved a tree to serve.
        var offlineAt: (cacheDirectory: URL, reason: String)?
        do {
            let full = try checker.currentAccount()
            account = OfflineStart.SavedAccount(email: full.email, displayName: full.name.displayName, accountID: full.accountID)
        } catch {
            let message = startupMessage(error, server: serverName, fix: credentials.fixHint)
            guard OfflineStart.isUnreachable(error), let saved = OfflineStart.find(options: options, profile: credentials.profile) else {
                throw Failure(description: message)
            }
            logger.warning("offline: \(message); serving the saved tree in \(saved.cacheDirectory.path)")
            account = saved.account
            offlineAt = (saved.cacheDirectory, message)
        }
        if !options.root.isEmpty && offlineAt == nil {
            do {
                guard let root = try checker.metadataIfExists(path: options.root) else {
                    throw Failure(description: "--root \(options.root) does not exist on \(serverName)")
                }
                guard root.folder != nil else { throw Failure(description: "--root \(options.root) is a file, not a folder") }
            } catch let error as DropboxError {
                throw Failure(description: startupMessage(error, server: serverName, fix: credentials.fixHint))
            } catch let error as Failure {
                throw error
            } catch {
                throw Failure(description: "\(error)")
            }
        }

        let cacheDirectory: URL
        if let offlineAt {
            cacheDirectory = offlineAt.cacheDirectory
        } else {
            cacheDirectory = try prepareCacheDirectory(options, accountID: account.accountID)
        }
        // Before the journal, the saved tree or the staging area is opened: one daemon per cache directory.
        let cacheLock: CacheDirectoryLock
        do {
            cacheLock = try CacheDirectoryLock.acquire(directory: cacheDirectory.path, mountpoint: options.mountpoint,
                                                       wait: options.waitForCache, stillWanted: stillWanted)
        } catch {
            throw Failure(description: error.description)
        }
        if offlineAt == nil {
            OfflineStart.remember(account, cacheDirectory: cacheDirectory, options: options, profile: credentials.profile)
        }
        let client = DropboxClient(configuration: ClientConfiguration(endpoints: endpoints, extraCAFile: options.caFile),
                                   tokens: credentials.tokens)
        let remote = DropboxRemoteStore(client: client, root: options.root)
        // The VFS reads through the gate (fails fast while offline); the watcher uses `remote` itself.
        let offline = OfflineState(offline: offlineAt != nil, reason: offlineAt?.reason)
        // No probes through the gate: a probe is a user's call paying the client's whole retry
        // budget (~6 s) against a dead network. The watcher probes instead, every 1-2 s, on its own
        // fail-fast client (two attempts, 5 s connect timeout), and ends offline mode for everyone.
        let gated = OfflineGatedRemote(remote, state: offline, probeInterval: nil)
        let watcherClient = DropboxClient(configuration: ClientConfiguration(endpoints: endpoints, extraCAFile: options.caFile, connectTimeout: 5,
                                                                             retryPolicy: RetryPolicy(maxAttempts: 2)),
                                          tokens: credentials.tokens)
        let watcherRemote = DropboxRemoteStore(client: watcherClient, root: options.root)

        var config = VFSConfig(uid: options.uid, gid: options.gid)
        config.umask = options.umask
        config.cacheDirectory = cacheDirectory
        config.diskCacheBytes = Int64(clamping: options.cacheSize)
        // Whole verified copies are only worth their disk I/O if the kernel may read them itself.
        config.keepWholeFiles = options.passthrough
        let logFile = options.logFile ?? cacheDirectory.appendingPathComponent("dbxfs.log").path
        let what = "\(account.email)\(options.root.isEmpty ? "" : ":" + options.root) (\(serverName))"
        let operations = try makeFilesystem(remote: gated, config: config, logger: logger, readOnly: options.readOnly)
        let vfs = operations.filesystem as? VFS
        let feed = vfs.map { try? ChangeFeed.prepare(vfs: $0, remote: watcherRemote, offline: offline, cacheDirectory: cacheDirectory, logger: logger) } ?? nil
        if offlineAt != nil && (feed?.loadedEntries ?? 0) == 0 {
            operations.shutdown()
            throw Failure(description: offlineAt!.reason)
        }
        // Uploads resumed from the journal show on the mount (in the background: it may list folders).
        if let vfs, (vfs.writeBack?.status().pendingFiles ?? 0) > 0 {
            Thread { vfs.showPendingUploads() }.start()
        }
        let status = MountStatusSource(
            account: AccountReport(email: account.email, displayName: account.displayName,
                                   accountId: account.accountID, profile: credentials.profile),
            server: serverName, root: options.root, readOnly: options.readOnly,
            cacheUsage: { vfs?.cacheUsage() }, writeBack: vfs?.writeBack,
            offline: { offline.isOffline ? (offline.reason ?? "Dropbox cannot be reached") : nil })
        // Case aliases: a file looked up in another case gets its own inode number, so the kernel
        // passes case-only renames on (VFSCache/CaseAliases.swift).
        var backend = MountBackend(operations: CaseAliases(operations.filesystem), description: what, logFile: logFile,
                                   shutdown: { feed?.stop(); operations.shutdown() }, statusSource: status, cacheLock: cacheLock)
        backend.startChangeWatcher = { sink in feed?.start(sink: sink) }
        return backend
    }

    /// The real facade over the remote. Kept in one place so the glue does not care how `VFS`
    /// is built or stopped.
    private static func makeFilesystem(remote: any RemoteStore, config: VFSConfig, logger: Logger, readOnly: Bool)
        throws(Failure) -> (filesystem: any FilesystemOperations, shutdown: () -> Void) {
        do {
            // Writable unless --read-only: the write-back engine journals in the cache directory
            // and resumes uploads left by an earlier run (killed, or unmounted before they finished).
            let vfs = try VFS(remote: remote, config: config, logger: logger, writeBack: readOnly ? nil : WriteBackConfiguration())
            // After unmount: drain the uploads (bounded), then let queued background work
            // (read-ahead, disk-cache writes) finish.
            return (vfs, { drainUploads(vfs, cacheDirectory: config.cacheDirectory, logger: logger); vfs.shutdown() })
        } catch {
            throw Failure(description: error.description)
        }
    }

    /// Seconds unmount waits for pending uploads (env DBXFS_UNMOUNT_DRAIN_SECONDS, default 120).
    static var drainSeconds: Double {
        ProcessInfo.processInfo.environment["DBXFS_UNMOUNT_DRAIN_SECONDS"].flatMap(Double.init) ?? 120
    }

    /// Unmount (fusermount3 -u, SIGTERM): waits up to `drainSeconds` for the uploads, then stops
    /// the engine. What is left stays journaled and resumes at the next mount of this cache.
    private static func drainUploads(_ vfs: VFS, cacheDirectory: URL?, logger: Logger) {
        guard let engine = vfs.writeBack else { return }
        let pending = engine.status().pendingFiles
        if pending > 0 { logger.info("unmounting: waiting up to \(Int(drainSeconds)) s for \(pending) pending upload(s)") }
        let left = engine.shutdown(drainUntil: Date().addingTimeInterval(drainSeconds))
        guard !left.isEmpty else {
            if pending > 0 { logger.info("unmounting: every pending upload is on Dropbox") }
            return
        }
        let kept = left.filter(\.journaled), lost = left.filter { !$0.journaled }
        if !kept.isEmpty {
            let names = kept.map { "\($0.path) (\($0.lastError ?? "pending"))" }.joined(separator: ", ")
            logger.warning("unmounted with \(kept.count) file(s) not uploaded yet; they stay journaled in \(cacheDirectory?.path ?? "the cache directory") and upload at the next mount with this cache directory: \(names)")
        }
        if !lost.isEmpty {
            // Closes the full cache disk never let us journal (docs/SEMANTICS.md, "Writing").
            logger.error("unmounted with \(lost.count) file(s) lost: their close could never be journaled (the cache directory's disk was full): \(lost.map(\.path).joined(separator: ", "))")
        }
    }

    /// `--cache-dir`, or $XDG_CACHE_HOME/dbxfs/<16 hex digits of sha256(server, account, root)>,
    /// so two accounts, or two roots of one account, never share a cache. Created 0700.
    private static func prepareCacheDirectory(_ options: MountOptions, accountID: String) throws(Failure) -> URL {
        let path: String
        if let explicit = options.cacheDirectory {
            path = explicit
        } else {
            let environment = ProcessInfo.processInfo.environment
            let base = environment["XDG_CACHE_HOME"].flatMap { $0.isEmpty ? nil : $0 }
                ?? ((environment["HOME"] ?? NSHomeDirectory()) + "/.cache")
            let key = "\(options.apiBase ?? "dropbox")\n\(accountID)\n\(options.root.lowercased())"
            path = base + "/dbxfs/" + String(hex(sha256(Array(key.utf8))).prefix(16))
        }
        do {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o700])
        } catch {
            throw Failure(description: "cannot create the cache directory \(path): \(error.localizedDescription)")
        }
        guard access(path, W_OK) == 0 else { throw Failure(description: "the cache directory \(path) is not writable") }
        return URL(fileURLWithPath: path)
    }

    private static func startupMessage(_ error: DropboxError, server: String, fix: String) -> String {
        // At mount time a refused token is the likely cause, and the fix depends on where the
        // token came from; everything else reads as it does for `auth` and `unlink`.
        if case .auth(let reason, _) = error { return "the access token was rejected by \(server) (\(reason)); \(fix)" }
        return ServerMessages.describe(error, server: server)
    }
}
