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
    /// `dbxfs history`, `restore`, `share`, ... (Control/FileCommandService.swift); nil in memory.
    var fileCommands: FileCommandService?
    /// Starts the change watcher once the FUSE session exists (its kernel notifier is the sink).
    var startChangeWatcher: (any CacheInvalidationSink) -> Void = { _ in }
    /// Called as soon as the daemon starts to stop, before the FUSE loop has ended: waiting
    /// requests (fsync) give up by the drain bound, so the loop can end.
    var beginStopping: @Sendable () -> Void = {}
    /// Once the mount is live: remembers where this account's cache is, for offline starts.
    var mounted: () -> Void = {}
    /// After a failure past `open` (the FUSE mount refused): removes the cache directory if this
    /// run created it, so a mount that never happened leaves nothing behind. Call after `shutdown`.
    var discardNewCache: () -> Void = {}
    /// The one line a detached mount prints when it is live (nil: nothing to say).
    var startupNote: String?

    /// `stillWanted` tells a `--wait-for-cache` wait whether anyone still waits for the mount.
    /// `metrics`, when given, hears from every client and cache of the mount and reads its gauges
    /// (queue, cache use, feed lag, connection) from what the backend builds.
    static func open(options: MountOptions, logger: Logger, metrics: MountMetrics? = nil,
                     stillWanted: () -> Bool = { true }) throws(Failure) -> MountBackend {
        switch options.backend {
        case .memory:
            let memory = MemoryFilesystem(uid: options.uid, gid: options.gid, umask: options.umask)
            return MountBackend(operations: memory, description: "an in-memory filesystem",
                                logFile: options.logFile, shutdown: {}, statusSource: .memory(readOnly: options.readOnly))
        case .dropbox:
            return try openDropbox(options: options, logger: logger, metrics: metrics, stillWanted: stillWanted)
        }
    }

    private static func openDropbox(options: MountOptions, logger: Logger, metrics: MountMetrics?,
                                    stillWanted: () -> Bool) throws(Failure) -> MountBackend {
        // A stored profile (dbxfs auth) refreshes its access token and saves each new one.
        let credentials: MountCredentials
        do {
            credentials = try MountCredentials.resolve(tokenFile: options.tokenFile, environmentToken: options.token,
                                                       profile: options.profile, logger: logger)
        } catch {
            throw Failure(description: error.description)
        }
        var options = options
        if options.apiBase == nil, let stored = credentials.apiBase {
            // The profile's own base (dbxfs auth checked it, an older dbxfs may not have).
            if let problem = APIBase.problem(stored) {
                throw Failure(description: "the api_base stored in \(credentials.storedFile ?? "the profile") \(problem); link again with 'dbxfs auth'")
            }
            options.apiBase = stored
        }
        let endpoints = options.apiBase.map { Endpoints(overridingAllWith: $0) } ?? .dropbox
        let serverName = options.apiBase ?? "Dropbox"

        // The start-up check fails fast (two attempts, short connect timeout) so a wrong URL or a
        // dead network gives its one line within seconds rather than after the full retry budget.
        var checkConfiguration = ClientConfiguration(endpoints: endpoints, extraCAFile: options.caFile, connectTimeout: 5,
                                                     retryPolicy: RetryPolicy(maxAttempts: 2))
        checkConfiguration.waitsForWarmUps = false   // it runs alongside the warm-ups (below)
        let checker = DropboxClient(configuration: checkConfiguration, tokens: credentials.tokens)
        // The mount's clients share the check's connections, and connections to the api and the
        // content host are opened and kept while the mount is in use: the first listing and the
        // first download pay one round trip, not three (ConnectionWarmer.swift). Opened alongside
        // the account check, not after it: a warm-up takes three round trips (TCP, TLS, its
        // request), the checks before the mount serves only two, and the first lookup, while
        // the whole-tree listing holds the check's connection, waited for the rest (at 50 ms,
        // 100 ms of a cold `stat`'s 350). Token-less, never retried; a failure is a debug line.
        let warmer = ConnectionWarmer(client: checker) { url, error in
            logger.debug("opening a connection ahead of need (\(url)) failed: \(error)")
        }
        var warmerHandedOver = false
        defer { if !warmerHandedOver { warmer.stop() } }
        warmer.start()
        var account: OfflineStart.SavedAccount
        // Offline start (issue 7): Dropbox unreachable, but an earlier mount saved a tree to serve.
        var offlineAt: (cacheDirectory: URL, reason: String)?
        do {
            let full = try checker.currentAccount()
            account = OfflineStart.SavedAccount(email: full.email, displayName: full.name.displayName, accountID: full.accountID,
                                                pathRootNamespace: teamRoot(full.rootInfo, options: options, logger: logger))
        } catch {
            warmer.stop()   // nothing to keep warm: offline, or about to fail
            let message = startupMessage(error, server: serverName, fix: credentials.fixHint)
            guard OfflineStart.isUnreachable(error), let saved = OfflineStart.find(options: options, profile: credentials.profile) else {
                throw Failure(description: message)
            }
            logger.warning("offline: \(message); serving the saved tree in \(saved.cacheDirectory.path)")
            account = saved.account
            offlineAt = (saved.cacheDirectory, message)
        }
        // A team member sees the team space only through its root namespace (Dropbox-API-Path-Root
        // on every call). An App-folder app may not send that header: then its app folder, in the
        // member's namespace, is all it can see anyway.
        if offlineAt == nil, let namespace = account.pathRootNamespace,
           !pathRootAccepted(namespace, configuration: checkConfiguration, tokens: credentials.tokens, server: serverName, logger: logger) {
            account.pathRootNamespace = nil
        }
        let pathRoot = account.pathRootNamespace.map { PathRoot.root($0) }
        var rootedCheck = checkConfiguration
        rootedCheck.pathRoot = pathRoot
        let rootedChecker = checker.sharingConnections(configuration: rootedCheck, tokens: credentials.tokens)
        var rootLower: String?
        if !options.root.isEmpty && offlineAt == nil {
            do {
                guard let root = try rootedChecker.metadataIfExists(path: options.root) else {
                    throw Failure(description: "--root \(options.root) does not exist on \(serverName)")
                }
                guard root.folder != nil else { throw Failure(description: "--root \(options.root) is a file, not a folder") }
                rootLower = root.pathLower
            } catch let error as DropboxError {
                throw Failure(description: startupMessage(error, server: serverName, fix: credentials.fixHint))
            } catch let error as Failure {
                throw error
            } catch {
                throw Failure(description: "\(error)")
            }
        }

        let cacheDirectory: URL
        var createdCache = false
        if let offlineAt {
            cacheDirectory = offlineAt.cacheDirectory
            do { try CacheDirectoryPrivacy.check(cacheDirectory.path) } catch { throw Failure(description: error.description) }
        } else {
            (cacheDirectory, createdCache) = try prepareCacheDirectory(options, accountID: account.accountID,
                                                                       namespace: account.pathRootNamespace)
        }
        // A mount refused from here on leaves no cache directory it made itself (nothing was
        // written through it, so nothing in it is worth keeping).
        var keepCache = false
        defer { if createdCache && !keepCache { discard(cacheDirectory) } }
        // Before the journal, the saved tree or the staging area is opened: one daemon per cache directory.
        let cacheLock: CacheDirectoryLock
        do {
            cacheLock = try CacheDirectoryLock.acquire(directory: cacheDirectory.path, mountpoint: options.mountpoint,
                                                       wait: options.waitForCache, stillWanted: stillWanted)
        } catch {
            throw Failure(description: error.description)
        }
        CacheDirectoryPrivacy.tighten(cacheDirectory.path, logger: logger)
        if offlineAt == nil { OfflineStart.saveAccount(account, in: cacheDirectory) }
        // The VFS reads through the gate (fails fast while offline); the watcher uses `remote` itself.
        let offline = OfflineState(offline: offlineAt != nil, reason: offlineAt?.reason)
        // Every client of the mount reports its retries, failures and successes here, for status
        // and for the log line when Dropbox stops accepting the token (or accepts it again).
        let connection = ConnectionMonitor(fix: credentials.mountedFix, offline: offline, log: logger)
        // The metrics hear every request of every client too (Metrics/MountMetrics.swift).
        let observer: any RequestObserver = metrics.map { RequestObservers([connection, $0]) } ?? connection
        var mainConfiguration = ClientConfiguration(endpoints: endpoints, extraCAFile: options.caFile, pathRoot: pathRoot)
        mainConfiguration.observer = observer
        let client = checker.sharingConnections(configuration: mainConfiguration, tokens: credentials.tokens)
        // A FUSE request waits on its remote calls: those give up (EAGAIN/EIO) after
        // `foregroundWaitSeconds` of 429s and back-offs. Uploads wait for nobody and keep retrying.
        // Both share one client: one connection pool, one token, one request pacer.
        // Its calls end when the mount starts to stop: a read or lookup waiting for a slow server
        // has nothing of the user's to keep, and libfuse's loop waits for every request in
        // progress. The uploads' client is not: its work drains until the stop's bound.
        let readsStop = CancelHandle()
        let remote = DropboxRemoteStore(client: client.bounded(maxWait: Self.foregroundWaitSeconds).cancelled(by: readsStop),
                                        root: options.root, rootLower: rootLower, log: logger, accessFix: credentials.mountedFix)
        let uploadRemote = DropboxRemoteStore(client: client, root: options.root, rootLower: rootLower, log: logger,
                                              accessFix: credentials.mountedFix)
        // No probes through the gate: a probe is a user's call paying the client's whole retry
        // budget (~6 s) against a dead network. The watcher probes instead, every 1-2 s, on its own
        // fail-fast client (two attempts, 5 s connect timeout), and ends offline mode for everyone.
        let gated = OfflineGatedRemote(remote, state: offline, probeInterval: nil)
        let gatedUploads = OfflineGatedRemote(uploadRemote, state: offline, probeInterval: nil)
        var watcherConfiguration = ClientConfiguration(endpoints: endpoints, extraCAFile: options.caFile, connectTimeout: 5,
                                                       retryPolicy: RetryPolicy(maxAttempts: 2), pathRoot: pathRoot)
        watcherConfiguration.observer = observer
        let watcherClient = DropboxClient(configuration: watcherConfiguration, tokens: credentials.tokens)
        let watcherRemote = DropboxRemoteStore(client: watcherClient, root: options.root, rootLower: rootLower, log: logger,
                                               accessFix: credentials.mountedFix)

        var config = VFSConfig(uid: options.uid, gid: options.gid)
        config.umask = options.umask
        config.cacheDirectory = cacheDirectory
        config.diskCacheBytes = Int64(clamping: options.cacheSize)
        // Whole verified copies are only worth their disk I/O if the kernel may read them itself.
        config.keepWholeFiles = options.passthrough
        config.passthroughWrites = options.passthroughWrites
        config.stagingBudget = options.stagingBudget
        config.observer = metrics
        let logFile = options.logFile ?? cacheDirectory.appendingPathComponent("dbxfs.log").path
        let what = "\(account.email)\(options.root.isEmpty ? "" : ":" + options.root) (\(serverName))"
        let stop = StopDeadline()
        let operations = try makeFilesystem(remote: gated, uploadRemote: gatedUploads, config: config, stop: stop, logger: logger,
                                            readOnly: options.readOnly)
        let vfs = operations.filesystem as? VFS
        let feed = vfs.map { try? ChangeFeed.prepare(vfs: $0, remote: watcherRemote, offline: offline, cacheDirectory: cacheDirectory, logger: logger) } ?? nil
        if offlineAt != nil && feed?.loadedEntries == nil {
            // Nothing to serve: stop at once (uploads stay journaled), no drain.
            stop.begin(drainSeconds: 0)
            operations.shutdown()
            throw Failure(description: offlineAt!.reason)
        }
        // Uploads resumed from the journal show on the mount (in the background: it may list folders).
        if let vfs, (vfs.writeBack?.status().pendingFiles ?? 0) > 0 {
            Thread { vfs.showPendingUploads() }.start()
        }
        // Files kept offline (dbxfs pin): the saved pins, checked once the mount serves.
        let pinned = vfs.map { PinnedFiles(vfs: $0, store: feed?.store) }
        let tokens = credentials.tokens
        connection.connect(adoptNewCredentials: { tokens.adoptReloaded(replacing: tokens.current.accessToken) },
                           resume: { vfs?.writeBack?.retryHeldUploads() })
        let status = MountStatusSource(
            account: AccountReport(email: account.email, displayName: account.displayName,
                                   accountId: account.accountID, profile: credentials.profile),
            server: serverName, root: options.root, readOnly: options.readOnly,
            cacheUsage: { vfs?.cacheUsage() }, writeBack: vfs?.writeBack,
            offline: { offline.isOffline ? (offline.reason ?? "Dropbox cannot be reached") : nil },
            connection: { connection.report(uploadsPausedUntil: $0) },
            beforeSync: { connection.adoptNewCredentialsIfRefused() },
            pins: { pinned?.totals().map { PinsStatusReport(paths: $0.pins, counts: PinCountsReport($0.counts), diskBytes: $0.diskBytes) } })
        metrics?.addGauges(MountMetrics.Sources(cacheUsage: { vfs?.cacheUsage() }, writeBack: { vfs?.writeBack?.status() },
                                                feedLag: { feed?.watcher.lag() }, connectionState: { connection.report().state }))
        // Case aliases: a file looked up in another case gets its own inode number, so the kernel
        // passes case-only renames on (VFSCache/Facade/CaseAliases.swift).
        var backend = MountBackend(operations: CaseAliases(operations.filesystem), description: what, logFile: logFile,
                                   shutdown: { warmer.stop(); pinned?.stop(); feed?.stop(); operations.shutdown() }, statusSource: status, cacheLock: cacheLock)
        // A person waits on the file commands: a client that gives up in seconds (FileCommandService).
        var commandConfiguration = ClientConfiguration(endpoints: endpoints, extraCAFile: options.caFile, connectTimeout: 5,
                                                       retryPolicy: RetryPolicy(maxAttempts: 3, maxTotalWait: 20), pathRoot: pathRoot)
        commandConfiguration.observer = metrics
        let commandClient = DropboxClient(configuration: commandConfiguration, tokens: credentials.tokens)
        let commandSink = ForwardingInvalidationSink()
        backend.fileCommands = FileCommandService(
            store: DropboxRemoteStore(client: commandClient, root: options.root, rootLower: rootLower, log: logger),
            vfs: vfs, offline: offline, sink: commandSink, logger: logger, pinned: pinned)
        backend.startChangeWatcher = { sink in
            commandSink.connect(sink)
            vfs?.tellKernel(through: sink)
            feed?.start(sink: sink)
            pinned?.start()
        }
        backend.beginStopping = { [stop] in
            let deadline = stop.begin(drainSeconds: drainSeconds)
            vfs?.writeBack?.stopWaiting(by: deadline)
            // A read waiting for a slow download fails now (EIO) instead of holding the loop for
            // the download's whole time.
            readsStop.cancel()
        }
        if offlineAt == nil {
            backend.mounted = { OfflineStart.remember(cacheDirectory: cacheDirectory, options: options, profile: credentials.profile) }
        } else {
            backend.startupNote = "\(offlineAt!.reason); mounted offline with the tree saved earlier: cached files can be read, "
                + "and files written are uploaded once Dropbox answers"
        }
        if createdCache { backend.discardNewCache = { discard(cacheDirectory) } }
        keepCache = true
        warmerHandedOver = true
        return backend
    }

    /// Removes a cache directory this run created, after a failed mount.
    private static func discard(_ directory: URL) {
        try? FileManager.default.removeItem(at: directory)
    }

    /// The real facade over the remote. Kept in one place so the glue does not care how `VFS`
    /// is built or stopped.
    private static func makeFilesystem(remote: any RemoteStore, uploadRemote: any RemoteStore, config: VFSConfig, stop: StopDeadline,
                                       logger: Logger, readOnly: Bool)
        throws(Failure) -> (filesystem: any FilesystemOperations, shutdown: () -> Void) {
        do {
            // Writable unless --read-only: the write-back engine journals in the cache directory
            // and resumes uploads left by an earlier run (killed, or unmounted before they finished).
            // Namespace operations left in the journal wait until the change feed showed them on
            // the tree (ChangeFeed.prepare), so their outcome cannot reach it before they do.
            var writeBack = WriteBackConfiguration()
            writeBack.holdRecoveredNamespaceOperations = true
            let vfs = try VFS(remote: remote, config: config, logger: logger, writeBack: readOnly ? nil : writeBack,
                              uploadRemote: uploadRemote)
            // After unmount: drain the uploads (bounded), then let queued background work
            // (read-ahead, disk-cache writes) finish.
            return (vfs, {
                drainUploads(vfs, until: stop.begin(drainSeconds: drainSeconds), cacheDirectory: config.cacheDirectory, logger: logger)
                vfs.shutdown()
            })
        } catch {
            throw Failure(description: error.description)
        }
    }

    /// Seconds a FUSE request's remote calls may spend waiting out rate limits and back-offs before
    /// the request fails (env DBXFS_FOREGROUND_WAIT_SECONDS, default 30; tests shorten it).
    static var foregroundWaitSeconds: Double {
        ProcessInfo.processInfo.environment["DBXFS_FOREGROUND_WAIT_SECONDS"].flatMap(Double.init) ?? 30
    }

    /// Seconds unmount waits for pending uploads (env DBXFS_UNMOUNT_DRAIN_SECONDS, default 120).
    static var drainSeconds: Double {
        ProcessInfo.processInfo.environment["DBXFS_UNMOUNT_DRAIN_SECONDS"].flatMap(Double.init) ?? 120
    }

    /// Unmount (fusermount3 -u, SIGTERM): waits up to `drainSeconds` for the uploads, then stops
    /// the engine. What is left stays journaled and resumes at the next mount of this cache.
    private static func drainUploads(_ vfs: VFS, until deadline: Date, cacheDirectory: URL?, logger: Logger) {
        guard let engine = vfs.writeBack else { return }
        let status = engine.status()
        let pending = status.pendingFiles + status.operations.count
        if pending > 0 {
            logger.info("unmounting: waiting up to \(Int(max(0, deadline.timeIntervalSinceNow))) s for \(counted(status.pendingFiles, "pending upload", "pending uploads")) and \(counted(status.operations.count, "change", "changes")) (mkdir, unlink, rmdir, rename)")
        }
        let left = engine.shutdown(drainUntil: deadline)
        guard !left.isEmpty else {
            if pending > 0 { logger.info("unmounting: every pending upload is on Dropbox (and every change)") }
            return
        }
        let kept = left.filter(\.journaled), lost = left.filter { !$0.journaled }
        if !kept.isEmpty {
            let names = kept.map { "\($0.operation ?? $0.path) (\($0.lastError ?? "pending"))" }.joined(separator: ", ")
            let changes = kept.filter { $0.operation != nil }.count
            let what = changes == 0 ? counted(kept.count, "file", "files")
                : "\(counted(kept.count - changes, "file", "files")) and \(counted(changes, "change", "changes"))"
            logger.warning("unmounted with \(what) not uploaded yet; they stay journaled in \(cacheDirectory?.path ?? "the cache directory") and upload at the next mount with this cache directory: \(names)")
        }
        if !lost.isEmpty {
            // Closes the full cache disk never let us journal (docs/SEMANTICS.md, "Writing").
            logger.error("unmounted with \(counted(lost.count, "file", "files")) lost: their close could never be journaled (the cache directory's disk was full): \(lost.map(\.path).joined(separator: ", "))")
        }
    }

    /// `--cache-dir`, or $XDG_CACHE_HOME/dbxfs/<16 hex digits of sha256(server, account, root)>,
    /// so two accounts, or two roots of one account, never share a cache. Created 0700; refused
    /// when it is someone else's or others can write to it (CacheDirectoryPrivacy).
    private static func prepareCacheDirectory(_ options: MountOptions, accountID: String,
                                              namespace: String?) throws(Failure) -> (URL, created: Bool) {
        let path: String
        if let explicit = options.cacheDirectory {
            path = explicit
        } else {
            let environment = ProcessInfo.processInfo.environment
            let base = environment["XDG_CACHE_HOME"].flatMap { $0.isEmpty ? nil : $0 }
                ?? ((environment["HOME"] ?? NSHomeDirectory()) + "/.cache")
            // The team root and the member folder are two namespaces: `--root /Docs` in each is
            // another folder, so they never share a cache (personal accounts keep their old key).
            var key = "\(options.apiBase ?? "dropbox")\n\(accountID)\n\(options.root.lowercased())"
            if let namespace { key += "\nns:\(namespace)" }
            path = base + "/dbxfs/" + String(hex(sha256(Array(key.utf8))).prefix(16))
        }
        let existed = FileManager.default.fileExists(atPath: path)
        do {
            try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true,
                                                    attributes: [.posixPermissions: 0o700])
        } catch {
            throw Failure(description: "cannot create the cache directory \(path): \(error.localizedDescription)")
        }
        do { try CacheDirectoryPrivacy.check(path) } catch { throw Failure(description: error.description) }
        guard access(path, W_OK) == 0 else { throw Failure(description: "the cache directory \(path) is not writable") }
        return (URL(fileURLWithPath: path), !existed)
    }

    /// The namespace to send as Dropbox-API-Path-Root: the team root for a team-space member
    /// (root_info of tag team, root ≠ home: rclone #2003, Maestral's update_path_root), unless
    /// `--member-folder` asks for the member's own folder. nil: no header (a personal account,
    /// whose root is its home).
    private static func teamRoot(_ info: FullAccount.RootInfo, options: MountOptions, logger: Logger) -> String? {
        guard info.rootNamespaceID != info.homeNamespaceID else { return nil }
        if options.memberFolder {
            logger.info("team space: mounting the member folder \(info.homePath ?? "") (--member-folder)")
            return nil
        }
        logger.info("team space: mounting the team root (namespace \(info.rootNamespaceID)); the member folder is \(info.homePath ?? "?") in it")
        return info.rootNamespaceID
    }

    /// Whether Dropbox takes the path root from this app. An App-folder app gets 400 "Path root
    /// is not supported for sandbox app." (rclone #5089): false, and one line in the log.
    private static func pathRootAccepted(_ namespace: String, configuration: ClientConfiguration, tokens: TokenProvider,
                                         server: String, logger: Logger) -> Bool {
        var rooted = configuration
        rooted.pathRoot = .root(namespace)
        do {
            _ = try DropboxClient(configuration: rooted, tokens: tokens).getLatestCursor(path: "")
            return true
        } catch .badInput(let text) where text.contains("Path root") || text.contains("sandbox") {
            logger.info("team space: this is an App folder app, which may not use the team root (\(server): \(text.prefix(120))); mounting its app folder in the member folder")
            return false
        } catch {
            // Anything else shows up again at once, with its own message, on the first real call.
            return true
        }
    }

    private static func startupMessage(_ error: DropboxError, server: String, fix: String) -> String {
        // At mount time a refused token is the likely cause, and the fix depends on where the
        // token came from; everything else reads as it does for `auth` and `unlink`.
        switch error {
        case .auth(.other, _):   // the token endpoint refused the refresh token
            return "\(ServerMessages.describe(error, server: server)); \(fix)"
        case .auth(let reason, _):
            return "the access token was rejected by \(server) (\(reason)); \(fix)"
        default:
            break
        }
        return ServerMessages.describe(error, server: server)
    }
}
