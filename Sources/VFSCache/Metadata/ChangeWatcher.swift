/// `ChangeWatcher`: keeps the mount in step with Dropbox. On its own thread it holds a cursor
/// for the whole tree under the mount root, long-polls on it, reads the changes (all pages),
/// applies them to the metadata cache, drops cached blocks of revs that changed, tells the
/// kernel what to forget (through a `CacheInvalidationSink`, from this thread, never from a FUSE
/// request), and saves each batch with its cursor in the `MetadataStore`: every change of the
/// batch, also those the in-memory tree sets aside (pending local writes, our own echoes), so the
/// saved tree is Dropbox as of the saved cursor (the store's invariant).
///
/// Where the cursor comes from, in order: a tree loaded from the store (the delta since its
/// saved cursor is applied first, one call); the tree's own recursive listing (made at once if
/// nothing is held yet); or, for a tree too big to hold whole, get_latest_cursor.
///
/// Failures: a `reset` cursor leads to one recursive relisting (or, in a per-folder tree, to
/// every folder being relisted on its next access), not one call per folder. Any other failure
/// (network down, server failing) marks the mount offline, and the watcher retries with
/// exponential backoff (1 s to 30 s), resuming from the same cursor, so it catches up with
/// everything that happened in between.
///
/// `stop()` returns at once: a long-poll in flight is abandoned (its answer is ignored), and
/// nothing is applied or saved after `stop()` returns.
import Foundation
import Synchronization

public final class ChangeWatcher: Sendable {
    public struct Options: Sendable {
        /// Seconds each long-poll may wait (Dropbox accepts 30–480).
        public var longpollTimeout: Int = 30
        /// First retry delay after a failure; doubles up to `maxRetryDelay`.
        public var retryDelay: Double = 1
        public var maxRetryDelay: Double = 30
        /// How long rounds must keep failing before the mount goes offline: one failed round (a
        /// 5xx or a reset past the watcher's two attempts) is a blip, not an unreachable Dropbox.
        /// A round that took this long to fail (timeouts) takes the mount offline at once.
        public var offlineAfter: Double = 3
        /// The wait before the next round while failures are younger than `offlineAfter`.
        public var graceRetryDelay: Double = 0.5
        /// How long a round that has news waits for the mount's own queued operations to settle
        /// before reading (`step`).
        public var ownOperationsWait: Double = 1
        /// The most changes gathered into one batch before it is applied (a long catch-up is
        /// applied batch by batch, so memory stays bounded); a batch may run a page past it, so as
        /// not to end between a path's deletion and the path made again (`readChanges`).
        public var gatherLimit: Int = 20_000
        public init(longpollTimeout: Int = 30, retryDelay: Double = 1, maxRetryDelay: Double = 30,
                    offlineAfter: Double = 3, graceRetryDelay: Double = 0.5) {
            self.longpollTimeout = min(max(longpollTimeout, 30), 480)
            self.retryDelay = retryDelay
            self.maxRetryDelay = maxRetryDelay
            self.offlineAfter = offlineAfter
            self.graceRetryDelay = graceRetryDelay
        }
    }

    /// Counters for status and tests.
    public struct Statistics: Sendable, Equatable {
        public var batches = 0
        public var changesApplied = 0
        public var invalidations = 0
        public var relists = 0
    }

    private struct State {
        var cursor: String?
        /// The tree came from the store: apply the delta since its cursor before long-polling.
        var needsCatchUp = false
        var started = false
        var stopping = false
        var statistics = Statistics()
        /// The last moment the tree was known to be in step with Dropbox (`lag`).
        var inStepAt: Date?
        /// A long-poll on a current cursor is waiting: it answers as soon as anything changes.
        var polling = false
    }

    private let vfs: VFS
    private let remote: any RemoteStore
    private let sink: any CacheInvalidationSink
    private let store: MetadataStore?
    private let options: Options
    private let log: Logger
    private let state = Mutex(State())
    /// Held while a batch is applied and saved, so `stop()` can wait for the one in progress.
    private let applying = Mutex(())
    private let wakeUp = DispatchSemaphore(value: 0)
    /// Shared with the `OfflineGatedRemote` the VFS reads through.
    public let offline: OfflineState

    public init(vfs: VFS, remote: any RemoteStore, sink: any CacheInvalidationSink, store: MetadataStore?,
                offline: OfflineState = OfflineState(), options: Options = Options()) {
        self.offline = offline
        // The log says when the mount goes offline and comes back, whoever finds out (OfflineState).
        let log = vfs.logger
        offline.announceChanges { offline, reason in
            if offline {
                log.warning("offline (\(reason ?? "Dropbox cannot be reached")); serving cached metadata and data, retrying")
            } else {
                log.info("online again: catching up with remote changes")
            }
        }
        self.vfs = vfs
        self.remote = remote
        self.sink = sink
        self.store = store
        self.options = options
        self.log = vfs.logger
    }

    /// True while Dropbox cannot be reached (or refuses us).
    public var isOffline: Bool { offline.isOffline }
    public var statistics: Statistics { state.withLock { $0.statistics } }

    /// How far behind Dropbox the mount's tree may be, in seconds: 0 while a long-poll waits on a
    /// current cursor (Dropbox would answer it at once on a change), else the time since the tree
    /// was last known to be in step (it grows while changes are read, and while offline). nil
    /// before the watcher first reached Dropbox.
    public func lag(at now: Date = Date()) -> Double? {
        state.withLock { state in
            guard let inStepAt = state.inStepAt else { return nil }
            return state.polling ? 0 : max(0, now.timeIntervalSince(inStepAt))
        }
    }

    private func noteInStep() { state.withLock { $0.inStepAt = Date() } }

    /// Loads the persisted tree into the cache, before the mount serves anything. Returns the
    /// number of entries loaded, nil when nothing usable was saved (an empty account saves a tree
    /// of 0 entries, which an offline start may serve).
    @discardableResult
    public func loadPersistedTree() -> Int? {
        guard let store else { return nil }
        do {
            guard let cursor = try store.cursor() else { return nil }
            let entries = try store.loadEntries()
            vfs.metadata.importTree(entries, cursor: cursor)
            state.withLock { $0.cursor = cursor; $0.needsCatchUp = true }
            return entries.count
        } catch {
            log.warning("cannot read the saved metadata in \(store.path): \(error); starting without it")
            return nil
        }
    }

    /// Applies what changed on Dropbox since the saved tree's cursor, now, on the caller's
    /// thread: at mount time, before the mount serves, so a remount shows Dropbox as it is and
    /// not the tree of the last unmount. False if Dropbox could not be asked (the watcher's thread
    /// catches up later; meanwhile the saved tree is served, as offline).
    @discardableResult
    public func catchUp() -> Bool {
        let (cursor, needed) = state.withLock { ($0.cursor, $0.needsCatchUp) }
        guard let cursor, needed else { return true }
        do throws(RemoteError) {
            try readChanges(from: cursor)
            state.withLock { $0.needsCatchUp = false; $0.inStepAt = Date() }
            return true
        } catch {
            log.warning("cannot catch up with Dropbox's changes since the last mount yet (\(error)); serving the saved tree until it answers")
            return false
        }
    }

    /// Starts the watcher thread (once).
    public func start() {
        let first = state.withLock { state -> Bool in
            defer { state.started = true }
            return !state.started && !state.stopping
        }
        guard first else { return }
        let thread = Thread { [self] in run() }
        thread.name = "dbxfs-changes"
        thread.start()
    }

    /// Stops the watcher; returns once no batch is being applied and none will be.
    public func stop() {
        state.withLock { $0.stopping = true }
        wakeUp.signal()
        applying.withLock { _ in }
        vfs.metadata.setWatched(false)
    }

    private var stopping: Bool { state.withLock { $0.stopping } }

    // MARK: The loop

    private func run() {
        var delay = options.retryDelay
        /// When the first round of the current run of failed rounds began.
        var failingSince: Date?
        while !stopping {
            let started = Date()
            do throws(RemoteError) {
                try step()
                delay = options.retryDelay
                failingSince = nil
            } catch {
                if stopping { return }
                let since = failingSince ?? started
                failingSince = since
                if !offline.isOffline, Date().timeIntervalSince(since) < options.offlineAfter {
                    // A blip until rounds have failed for a while: users' calls go on meanwhile.
                    log.debug("change feed: \(error); trying again")
                    sleep(options.graceRetryDelay)
                    continue
                }
                // The tree stays "watched": offline, the cached tree is the best answer, and
                // trying Dropbox on every TTL expiry would only make each lookup wait. The
                // feed catches up from the same cursor once Dropbox answers again. A refused
                // access is not offline: Dropbox answers, and the mount says what to do.
                if case .auth = error {} else { setOffline("\(error)") }
                offline.noteNextProbe(at: Date().addingTimeInterval(delay))
                sleep(delay)
                delay = min(delay * 2, options.maxRetryDelay)
            }
        }
    }

    /// One round: connect if needed, then either catch up or long-poll (and catch up).
    /// Internal so tests can drive the watcher without its thread.
    func step() throws(RemoteError) {
        let (cursor, catchUp) = state.withLock { ($0.cursor, $0.needsCatchUp) }
        guard let cursor else {
            try connect()
            return
        }
        // Offline, a continue is the probe: it answers at once (a long-poll would hold the news
        // that Dropbox is back until its timeout) and brings whatever changed meanwhile.
        if catchUp || offline.isOffline {
            try readChanges(from: cursor)
            state.withLock { $0.needsCatchUp = false }
            noteInStep()
            setOnline()
            return
        }
        let answer: (changes: Bool, backoff: Int?)
        state.withLock { $0.polling = true }
        defer { state.withLock { $0.polling = false } }
        do throws(RemoteError) {
            answer = try remote.longpoll(cursor: cursor, timeout: options.longpollTimeout)
        } catch .cursorReset {
            state.withLock { $0.polling = false }
            try relist()
            noteInStep()
            setOnline()
            return
        }
        // In step up to this answer: whatever it announces changed just now.
        state.withLock { $0.polling = false; $0.inStepAt = Date() }
        if stopping { return }
        setOnline()
        if answer.changes {
            // Dropbox makes a batch of the mount's own (an `rm -rf` sent as one delete_batch) a
            // few paths at a time, and the long-poll answers at each: read now, its echoes cost a
            // long-poll and a continue per few paths (14 pages for 1000 deletes). Read once they
            // are all made, at most `ownOperationsWait` later (other clients' news waits as long).
            vfs.metadata.waitUntilNoPendingOperations(until: Date().addingTimeInterval(options.ownOperationsWait))
            if stopping { return }
            try readChanges(from: cursor)
            noteInStep()
        }
        if let backoff = answer.backoff, backoff > 0 { sleep(Double(backoff)) }
    }

    /// Gets a cursor: the tree's own (listing it first if nothing is held), else a latest cursor.
    private func connect() throws(RemoteError) {
        let metadata = vfs.metadata
        if !metadata.holdsWholeTree {
            do throws(Errno) {
                try metadata.ensureWholeTree()
            } catch {
                throw .unavailable("listing the mount root failed (\(error))")
            }
        }
        let cursor: String
        if metadata.holdsWholeTree, let listing = metadata.takeListing() {
            // Follow the feed from the listing's own cursor, so the listing saved with it is
            // exactly Dropbox at that cursor (the tree may already hold our own later changes:
            // replaying them from the feed is harmless).
            cursor = listing.cursor
            persistSnapshot(listing.entries, cursor: listing.cursor)
        } else if metadata.holdsWholeTree, let treeCursor = metadata.treeCursor {
            // No listing to save with this cursor: nothing is saved until the next relist.
            cursor = treeCursor
        } else {
            cursor = try remote.latestCursor(path: "", recursive: true)
        }
        state.withLock { $0.cursor = cursor; $0.inStepAt = Date() }
        setOnline()
    }

    /// Reads every page since `cursor` and applies them; a reset cursor leads to one relisting.
    ///
    /// Pages are gathered until Dropbox says no more follow (or `gatherLimit` changes are held)
    /// and applied as one batch: a page may end between a path's deletion and the path made
    /// again (change_feed.py), and applied alone it would take the path away from the mount
    /// until the next page came (`aPathDeletedAndMadeAgainIsNeverMissingBetweenPages`). At the
    /// limit, a batch that ends with a deletion reads one page more: if that page begins by
    /// making the path again it joins the batch, else it is carried, unapplied, into the next.
    private func readChanges(from cursor: String) throws(RemoteError) {
        var start = cursor
        /// A page read past the last batch, with the stamp taken before its fetch.
        var carried: (page: RemoteListPage, stamp: LocalChangeLog.Stamp)?
        do throws(RemoteError) {
            while true {
                // The stamp of the first page's fetch covers the whole batch: a change of the
                // mount's own made while any of its pages travelled is newer than the batch.
                var stamp = vfs.metadata.fetchStamp()
                var changes: [RemoteChange] = []
                var next = start
                var hasMore = true
                func take(_ page: RemoteListPage) {
                    changes += page.changes
                    next = page.cursor
                    hasMore = page.hasMore
                }
                if let (page, pageStamp) = carried {
                    carried = nil
                    stamp = pageStamp
                    take(page)
                }
                while hasMore && changes.count < options.gatherLimit {
                    let page = try remote.listFolderContinue(cursor: next)
                    if stopping { return }
                    take(page)
                }
                while hasMore, case .deleted(let deleted, _)? = changes.last {
                    let pageStamp = vfs.metadata.fetchStamp()
                    let page = try remote.listFolderContinue(cursor: next)
                    if stopping { return }
                    guard case .upsert(let entry)? = page.changes.first, entry.pathLower == deleted else {
                        carried = (page, pageStamp)
                        break
                    }
                    take(page)
                }
                // Overlapped more of the mount's own changes than it can sort out: ask again
                // (from `start`: a carried page is read again with the rest).
                guard apply(changes, from: start, cursor: next, since: stamp) else { carried = nil; continue }
                start = next
                if !hasMore { return }
            }
        } catch .cursorReset {
            try relist()
        }
    }

    /// Applies and saves one batch; false if it must be fetched again. Paths whose change gave way
    /// to one of the mount's own while the tree shows something else are then looked up again
    /// (`AppliedChanges.recheck`: `aRemoteChangeSkippedForAnOwnChangeIsLookedUpAgain`).
    private func apply(_ changes: [RemoteChange], from previous: String, cursor: String, since stamp: LocalChangeLog.Stamp) -> Bool {
        guard let recheck = applyBatch(changes, from: previous, cursor: cursor, since: stamp) else { return false }
        if !recheck.isEmpty {
            log.debug("looking up again what the feed said of \(recheck.count) paths whose change gave way to one of the mount's own")
            let (invalidations, unanswered) = vfs.metadata.refreshFromDropbox(recheck)
            if !invalidations.isEmpty { sink.invalidate(invalidations) }
            // The feed has moved past them: only a fetch corrects them now (not at once: this
            // one just failed, and warned).
            vfs.refreshAgain(unanswered, after: 1)
        }
        return true
    }

    /// `apply` under `applying`: the paths to look up again, nil if the batch must be fetched again.
    private func applyBatch(_ changes: [RemoteChange], from previous: String, cursor: String,
                            since stamp: LocalChangeLog.Stamp) -> [String]? {
        applying.withLock { _ -> [String]? in
            guard !stopping else { return [] }
            guard let result = vfs.metadata.applyFeed(changes, cursor: cursor, since: stamp) else { return nil }
            for stale in result.staleRevs { vfs.blocks.purge(fileID: stale.fileID, rev: stale.rev) }
            if !result.invalidations.isEmpty { sink.invalidate(result.invalidations) }
            save(changes, from: previous, to: cursor)
            state.withLock { state in
                state.cursor = cursor
                state.statistics.batches += 1
                state.statistics.changesApplied += result.applied.count
                state.statistics.invalidations += result.invalidations.count
            }
            if !changes.isEmpty {
                log.debug("applied \(result.applied.count) of \(changes.count) remote changes, \(result.invalidations.count) kernel invalidations")
                vfs.noteTreeChanged()
            }
            return result.recheck
        }
    }

    /// The cursor was reset: one recursive listing of the whole tree (or, for a tree kept folder by
    /// folder, every folder relisted lazily on its next access).
    private func relist() throws(RemoteError) {
        log.info("the change cursor was reset: relisting the tree")
        state.withLock { $0.statistics.relists += 1 }
        let metadata = vfs.metadata
        if metadata.holdsWholeTree {
            let (result, listing, cursor) = try metadata.relistTree()
            applying.withLock { _ in
                guard !stopping else { return }
                for stale in result.staleRevs { vfs.blocks.purge(fileID: stale.fileID, rev: stale.rev) }
                if !result.invalidations.isEmpty { sink.invalidate(result.invalidations) }
                state.withLock { $0.cursor = cursor; $0.statistics.invalidations += result.invalidations.count }
            }
            vfs.noteTreeChanged()
            persistSnapshot(listing, cursor: cursor)
        } else {
            let cursor = try remote.latestCursor(path: "", recursive: true)
            applying.withLock { _ in
                guard !stopping else { return }
                let folders = metadata.forgetListings()
                if !folders.isEmpty { sink.invalidate(folders) }
                try? store?.clear()
                state.withLock { $0.cursor = cursor }
            }
        }
    }

    /// Saves a complete recursive listing with the cursor it ended with (first connection, after
    /// a relist).
    private func persistSnapshot(_ entries: [RemoteEntry], cursor: String) {
        guard let store else { return }
        applying.withLock { _ in
            guard !stopping else { return }
            do {
                try store.replaceAll(entries, cursor: cursor)
                log.debug("saved \(entries.count) entries of metadata")
            } catch {
                log.warning("saving the metadata tree failed: \(error)")
            }
        }
    }

    /// Saves one feed batch with its cursor (`applying` held). A batch that does not continue the
    /// saved cursor, or a failed write, makes the store forget its tree: a later mount then lists
    /// afresh rather than trust a tree that misses changes.
    private func save(_ changes: [RemoteChange], from previous: String, to cursor: String) {
        guard let store else { return }
        do {
            try store.apply(changes, from: previous, to: cursor)
        } catch is MetadataStore.CursorMismatch {
            // Nothing saved (a tree too big to hold, or a listing that could not be saved): fine.
            if (try? store.cursor()) != nil {
                log.warning("the saved metadata does not continue from this change batch; forgetting it")
                try? store.clear()
            }
        } catch {
            log.warning("saving metadata changes failed: \(error); forgetting the saved tree")
            try? store.clear()
        }
    }

    // MARK: Online/offline

    private func setOffline(_ reason: String) { offline.set(offline: true, reason: reason) }

    private func setOnline() {
        vfs.metadata.setWatched(true)
        offline.set(offline: false)
    }

    /// Marks the watcher offline before it starts (the mount began without reaching Dropbox).
    public func startOffline(reason: String) { setOffline(reason) }

    /// Sleeps up to `seconds`, cut short by `stop()`.
    private func sleep(_ seconds: Double) {
        _ = wakeUp.wait(timeout: .now() + seconds)
        if stopping { wakeUp.signal() }
    }
}
