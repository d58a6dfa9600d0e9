/// `MetadataCache`: the tree of names and attributes, filled from Dropbox listings and kept for a
/// TTL. It answers lookups (case-insensitively, keeping the display case), caches negative
/// answers, hands readdir a snapshot of a folder, and keeps the inode table's lookup counts.
///
/// How the tree is filled (the reasoning and figures are in docs/VFSCACHE.md):
/// - First access to any folder lists the whole tree under the mount root with ONE recursive
///   list_folder (2000-entry pages), unless it exceeds `recursivePrefetchMaxEntries`; a cold
///   `ls -lR` or `find` of a small or medium tree then costs a handful of calls in total.
/// - While the tree is held this way, every folder is fresh for `directoryTTL`; after that one
///   list_folder/continue on the saved cursor brings the whole tree up to date (a delta, usually
///   one call). A `reset` cursor leads to one new recursive listing.
/// - A tree over the cap is listed folder by folder (non-recursive list_folder + continue),
///   each folder refreshed on its own after `directoryTTL`.
/// - A listing that fails while an older one is cached serves the older one, with a warning.
/// - A name missing from a listing is ENOENT at no cost for `negativeTTL`. Past that, one refresh
///   of the listing answers every missing name at once (a delta call when the whole tree is held,
///   else one listing of a small folder); in a folder of more than one listing page, one
///   metadata call confirms that name alone, and its answer is cached for `negativeTTL`.
///
/// Concurrency: one lock (`lock`) guards the table and the tree state, held only for in-memory
/// work, never across a remote call. Everything fetched from Dropbox (listings, feed batches,
/// metadata answers) is applied through `applyingFetched`, which never lets an answer older than
/// one of the mount's own changes undo it (`LocalChangeLog`). Listings of one folder (and the whole-tree listing) run
/// single-flight, so a burst of lookups in a cold folder costs one listing.
import Foundation

final class MetadataCache: @unchecked Sendable {
    // @unchecked: `table`, `tree` and `watched` are only touched with `lock` held.
    // Not private: the change watcher's extension (MetadataCache+Changes.swift) applies feeds under the same lock.
    enum TreeState {
        /// Nothing listed recursively yet.
        case unknown
        /// The whole tree is known, complete as of `refreshedAt`; `cursor` gives the delta since.
        case recursive(cursor: String, refreshedAt: Double)
        /// Too big to prefetch: folders are listed one at a time.
        case perFolder
    }

    /// Key of the whole-tree listing in `listings` (no folder has inode 0).
    private static let wholeTree: InodeNumber = 0

    /// A condition so that applying a fetched answer can wait for local changes in flight.
    let lock = NSCondition()
    var table = InodeTable()
    /// The mount's own changes on Dropbox, so older answers do not undo them.
    var localChanges = LocalChangeLog()
    var tree: TreeState = .unknown
    /// True while the change watcher is connected and applying the feed: the held tree is then
    /// current (to within the feed's delay), so no TTL refresh is needed.
    var watched = false
    /// The last complete recursive listing and the cursor it ended with, kept until the change
    /// watcher saves it (`takeListing`): the one snapshot of Dropbox that matches a cursor
    /// exactly. The tree itself is no such snapshot: the mount's own operations change it
    /// before the feed reports them.
    var completeListing: (entries: [RemoteEntry], cursor: String)?
    /// Folder accesses answered by their own listing while the current whole-tree listing runs.
    var eagerListings = 0
    /// Of those, the ones in flight, and when the last one ended: the whole-tree listing holds
    /// back its next page meanwhile (`yieldToEagerListings`).
    var eagerListingsInFlight = 0
    var lastEagerListingEnded = Date.distantPast
    /// Set once a whole-tree listing completed: only a cold mount's first one is worth racing
    /// (after a cursor reset the tree at hand answers meanwhile).
    var treeEverListed = false
    /// Our case-only renames whose halfway steps the feed may still show (MetadataCache+CaseRenames.swift).
    var caseRenames: [PendingCaseRename] = []
    /// Per file id, the revs the tree showed from our own commits and conflicts, in the order
    /// Dropbox made them (the last few): the feed never takes a file back to an earlier one
    /// (MetadataCache+Changes.swift).
    var shownRevisions = ShownRevisions()
    private let listings = SingleFlight<InodeNumber, Void>()
    /// Folders listed ahead of their own lookup (`listAhead`), by path key.
    private let aheadListings = SingleFlight<String, Void>()

    let remote: any RemoteStore
    let config: VFSConfig
    let clock: TimeSource
    let log: Logger

    init(remote: any RemoteStore, config: VFSConfig, clock: TimeSource, log: Logger) {
        self.remote = remote
        self.config = config
        self.clock = clock
        self.log = log
    }

    /// Runs `body` with the table locked (also used by the write side, MetadataCache+Write.swift).
    func locked<T, E: Error>(_ body: (inout InodeTable) throws(E) -> T) throws(E) -> T {
        lock.lock()
        defer { lock.unlock() }
        return try body(&table)
    }

    // MARK: Queries

    func node(_ ino: InodeNumber) -> Node? { locked { $0[ino] } }

    func nodes(_ inos: some Sequence<InodeNumber>) -> [Node?] { locked { table in inos.map { table[$0] } } }

    func path(of ino: InodeNumber) -> String? { locked { $0.path(of: ino) } }

    var nodeCount: Int { locked { $0.count } }

    /// The cursor of the recursive listing, once the whole tree is held (for the change watcher).
    var treeCursor: String? {
        lock.lock(); defer { lock.unlock() }
        if case .recursive(let cursor, _) = tree { return cursor }
        return nil
    }

    // MARK: FUSE operations

    /// The child `name` of `parent`, with one more lookup reference. Throws ENOENT when absent.
    func lookup(parent: InodeNumber, name: String) throws(Errno) -> Node {
        guard name.utf8.count <= 255 else { throw .nameTooLong }
        try ensureListed(parent, lookingUp: name)
        switch try find(name, in: parent) {
        case .found(let node):
            return node
        case .absent:
            throw .noEntry
        case .stale(let parentPath, let relist):
            if relist {
                // One refresh answers every missing name at once (a delta call when the whole
                // tree is held, else one listing of a small folder).
                try ensureListed(parent, maxAge: config.negativeTTL)
                if case .found(let node) = try find(name, in: parent, trustingListing: true) { return node }
                throw .noEntry
            }
            return try confirm(name, in: parent, parentPath: parentPath)
        }
    }

    private enum Found {
        case found(Node)
        case absent
        /// Absent from a listing older than `negativeTTL`: confirm by relisting, or by one
        /// metadata call in a folder too big to relist for one name.
        case stale(parentPath: String, relist: Bool)
    }

    /// The child, with one more lookup reference; or why it is absent.
    private func find(_ name: String, in parent: InodeNumber, trustingListing: Bool = false) throws(Errno) -> Found {
        let key = InodeTable.key(name)
        let now = clock.now()
        lock.lock()
        defer { lock.unlock() }
        guard let dir = table[parent] else { throw .noEntry }
        if let child = dir.children[key] {
            table.addLookup(child)
            return .found(table[child]!)
        }
        let listedRecently = lastListed(dir).map { now - $0 < config.negativeTTL } ?? false
        let knownAbsent = table.negative(key, in: parent).map { now - $0 < config.negativeTTL } ?? false
        guard !trustingListing, !listedRecently, !knownAbsent, let parentPath = table.path(of: parent) else { return .absent }
        // A folder our queued operations made or moved: Dropbox does not know it yet, the tree does.
        if localChanges.isPending(parentPath) { return .absent }
        var heldWhole = false
        if case .recursive = tree { heldWhole = true }
        return .stale(parentPath: parentPath, relist: heldWhole || dir.children.count <= config.listPageSize)
    }

    /// One metadata call for one name; its answer is cached (a negative one for `negativeTTL`).
    private func confirm(_ name: String, in parent: InodeNumber, parentPath: String) throws(Errno) -> Node {
        let now = clock.now()
        let stamp = fetchStamp()
        let entry: RemoteEntry?
        do throws(RemoteError) {
            entry = try remote.metadata(path: parentPath + "/" + name)
        } catch .notFound {
            entry = nil
        } catch {
            log.warning("lookup of \(parentPath)/\(name) failed, answering from the cached listing: \(error)")
            throw .noEntry
        }
        let found = try applyingFetched(since: stamp) { changed throws(Errno) -> Node in
            let key = InodeTable.key(name)
            // Changed here meanwhile: the tree's answer is the newer one.
            if changed.covers(parentPath + "/" + name) {
                guard let ino = table.child(of: parent, key: key) else { throw .noEntry }
                table.addLookup(ino)
                return table[ino]!
            }
            guard let entry else {
                table.setNegative(key, in: parent, at: now)
                throw .noEntry
            }
            guard let ino = upsertFetched(entry, under: parent, generation: 0) else { throw .noEntry }
            table.addLookup(ino)
            return table[ino]!
        }
        guard let found else { throw .noEntry }
        return found
    }

    func addLookup(_ ino: InodeNumber) { locked { $0.addLookup(ino) } }

    func forget(_ ino: InodeNumber, count: UInt64) { locked { $0.forget(ino, count: count) } }

    /// The node, refreshed if what we know of it is past `directoryTTL` (so `stat` and `open`
    /// see remote changes): through its folder's listing (one delta call when the whole tree is
    /// held), or, in a folder of more than one listing page, through one metadata call for the
    /// node alone. A failed refresh serves the cached node.
    func refreshedNode(_ ino: InodeNumber) throws(Errno) -> Node {
        let now = clock.now()
        lock.lock()
        guard let node = table[ino] else { lock.unlock(); throw .noEntry }
        guard node.parent != 0, let parent = table[node.parent] else { lock.unlock(); return node }
        let times = [lastListed(parent), table.confirmedAt(ino)].compactMap { $0 }
        if let newest = times.max(), now - newest < config.directoryTTL { lock.unlock(); return node }
        // Queued operations of ours touch it: the tree is newer than what Dropbox would say.
        if let path = table.path(of: ino), localChanges.isPending(path) { lock.unlock(); return node }
        var heldWhole = false
        if case .recursive = tree { heldWhole = true }
        let alone = !heldWhole && parent.children.count > config.listPageSize
        let path = table.path(of: ino)
        lock.unlock()

        if alone, let path {
            let stamp = fetchStamp()
            do throws(RemoteError) {
                let entry = try remote.metadata(path: path)
                applyingFetched(since: stamp) { changed in
                    guard !changed.covers(path), table.path(of: ino) == path else { return }
                    if let entry, entry.isFolder == node.isDirectory, let same = upsertFetched(entry, under: node.parent, generation: 0) {
                        table.setConfirmed(same, at: now)
                    } else {
                        table.detach(ino)
                    }
                }
            } catch .notFound {
                applyingFetched(since: stamp) { changed in
                    if !changed.covers(path), table.path(of: ino) == path { table.detach(ino) }
                }
            } catch {
                log.warning("refreshing \(path) failed, serving cached attributes: \(error)")
            }
        } else {
            try? ensureListed(node.parent)
        }
        guard let fresh = self.node(ino) else { throw .noEntry }
        return fresh
    }

    /// The folder's children as (display name, inode), after making sure the listing is fresh.
    /// O(children); the order is unspecified but fixed for the snapshot.
    func snapshot(of dir: InodeNumber) throws(Errno) -> [(name: String, ino: InodeNumber)] {
        try ensureListed(dir)
        return try locked { table throws(Errno) in
            guard let node = table[dir] else { throw .noEntry }
            var result: [(name: String, ino: InodeNumber)] = []
            result.reserveCapacity(node.children.count)
            for ino in node.children.values {
                if let child = table[ino] { result.append((child.name, ino)) }
            }
            return result
        }
    }

    /// Records that the kernel opened the file at `rev`; true if it had it open at that rev
    /// before (so its page cache still holds these bytes).
    func noteOpened(_ ino: InodeNumber, rev: String) -> Bool {
        locked { table in
            let same = table.lastOpenedRev(ino) == rev
            table.setLastOpenedRev(ino, rev)
            return same
        }
    }

    /// Forget what the kernel caches for this file (after a content-hash mismatch).
    func clearOpenedRev(_ ino: InodeNumber) { locked { $0.setLastOpenedRev(ino, nil) } }

    // MARK: Listing

    /// When the folder's contents were last confirmed complete, by its own listing or the tree's.
    private func lastListed(_ dir: Node) -> Double? {
        var times: [Double] = []
        if let listed = table.listedAt(dir.ino) { times.append(listed) }
        if case .recursive(_, let at) = tree, dir.isAttached { times.append(watched ? .infinity : at) }
        return times.max()
    }

    /// Makes sure `dir`'s listing is no older than `maxAge` (default `directoryTTL`). `lookingUp`:
    /// the name a lookup asks for in `dir` (a cold mount also lists that as a folder meanwhile,
    /// `listAhead`).
    func ensureListed(_ dir: InodeNumber, maxAge: Double? = nil, lookingUp name: String? = nil) throws(Errno) {
        let maxAge = maxAge ?? config.directoryTTL
        let deadline = Date(timeIntervalSinceNow: config.readTimeout)
        for attempt in 0..<3 {
            let now = clock.now()
            lock.lock()
            guard let node = table[dir] else { lock.unlock(); throw .noEntry }
            guard node.isDirectory else { lock.unlock(); throw .notDirectory }
            let listed = lastListed(node)
            if let listed, now - listed < maxAge { lock.unlock(); return }
            guard let path = table.path(of: dir) else { lock.unlock(); throw .noEntry }
            // Made or moved by queued operations of ours: Dropbox has not got it yet (a listing
            // would say "not found"); what it holds is what the tree shows.
            if localChanges.isPending(path) { lock.unlock(); return }
            let state = tree
            lock.unlock()
            // Listed ahead of this lookup, and that listing still under way: its answer is this one.
            if attempt < 2, aheadListings.isRunning(InodeTable.key(path)) {
                _ = try? aheadListings.join(InodeTable.key(path), deadline: deadline)
                continue
            }

            do throws(Errno) {
                switch state {
                case .unknown where config.recursivePrefetchMaxEntries > 0 && attempt < 2:
                    // The whole tree is listed in the background; the first few folder accesses
                    // meanwhile list their folder on their own rather than wait for all of it.
                    if startPrefetch() {
                        defer { endEagerListing() }
                        try listings.run(dir, deadline: deadline) { () throws(Errno) in
                            if let name { listAhead(name, in: dir, path: path) }
                            try listFolder(dir, path: path)
                        }
                        return
                    }
                    _ = try listings.join(Self.wholeTree, deadline: deadline)
                case .recursive(let cursor, _) where attempt < 2:
                    try listings.run(Self.wholeTree, deadline: deadline) { () throws(Errno) in try refreshTree(from: cursor) }
                default:
                    try listings.run(dir, deadline: deadline) { () throws(Errno) in try listFolder(dir, path: path) }
                    return
                }
            } catch {
                // Serve an older listing rather than failing the caller.
                if listed != nil && error != .noEntry && error != .notDirectory {
                    log.warning("refreshing \(path.isEmpty ? "/" : path) failed (\(error)); serving the cached listing")
                    return
                }
                throw error
            }
        }
    }

    /// Starts the whole-tree listing on a thread of its own unless it is under way; true if the
    /// caller may list its own folder meanwhile (`eagerListingsWhilePrefetching`).
    private func startPrefetch() -> Bool {
        if let claim = listings.claim(Self.wholeTree) {
            locked { _ in eagerListings = treeEverListed ? config.eagerListingsWhilePrefetching : 0 }
            let thread = Thread { [self] in
                let result: Result<Void, Errno>
                do throws(Errno) { try prefetchTree(); result = .success(()) } catch { result = .failure(error) }
                listings.finish(claim, result)
            }
            thread.name = "dbxfs-prefetch"
            thread.start()
        }
        return beginEagerListing()
    }

    /// Takes one of the cold mount's eager listings (`eagerListingsWhilePrefetching`), counted in
    /// flight until `endEagerListing`; false when none is left.
    private func beginEagerListing() -> Bool {
        locked { _ in
            guard eagerListings < config.eagerListingsWhilePrefetching else { return false }
            eagerListings += 1
            eagerListingsInFlight += 1
            return true
        }
    }

    /// An eager listing ended: the whole-tree listing may go on after its quiet time.
    private func endEagerListing() {
        locked { _ in eagerListingsInFlight -= 1; lastEagerListingEnded = Date() }
        lock.broadcast()
    }

    /// On a cold mount, a lookup of `name` in a folder listed on its own also lists `name` as a
    /// folder, at the same time, in the background: the kernel resolves a path one name at a time,
    /// so a `stat` five folders deep took five round trips, one listing per folder, and with this
    /// the lookup of the next name is answered from that listing at once. Every other level so:
    /// about half the round trips. It costs a call when the name is a file or missing (an error
    /// answer), and it draws on the same allowance as the folder listings it pairs with
    /// (`eagerListingsWhilePrefetching`), so a mount spends at most that many calls on it. Called
    /// inside the parent's listing flight: the answer is applied once the parent's listing made
    /// the node (its lookup then joins this flight rather than list again, `ensureListed`).
    private func listAhead(_ name: String, in parent: InodeNumber, path parentPath: String) {
        let childPath = parentPath + "/" + name
        let key = InodeTable.key(childPath)
        guard let claim = aheadListings.claim(key) else { return }
        // The whole-tree listing gives way to it too.
        guard beginEagerListing() else {
            aheadListings.finish(claim, .success(()))
            return
        }
        // A thread of its own: Dispatch runs blocking work only as wide as the cores.
        let thread = Thread { [self] in
            defer { endEagerListing() }
            let started = clock.now()
            let generation = locked { $0.newGeneration() }
            let stamp = fetchStamp()
            let changes: [RemoteChange]
            do throws(RemoteError) {
                changes = try listAllPages(path: childPath, recursive: false).changes
            } catch {
                // A file, a missing name, a failure: the lookups go on as if nothing was asked.
                if case .notFolder = error {} else if case .notFound = error {} else {
                    log.debug("listing \(childPath) ahead of its lookup failed: \(error)")
                }
                aheadListings.finish(claim, .success(()))
                return
            }
            _ = try? listings.join(parent)   // the parent's listing makes the node
            let child = locked { table in table.resolve(path: childPath).flatMap { table[$0]?.isDirectory == true ? $0 : nil } }
            if let child, (try? applyChildren(changes, of: child, generation: generation, since: stamp)) != nil {
                _ = markListed(child, generation: generation, since: stamp, started: started)
            }
            aheadListings.finish(claim, .success(()))
        }
        thread.name = "dbxfs-list-ahead"
        thread.start()
    }

    /// Makes sure the whole tree is held (or known to be too big): for the change watcher, whose
    /// cursor is the recursive listing's. Joins a listing under way.
    func ensureWholeTree() throws(Errno) {
        guard config.recursivePrefetchMaxEntries > 0 else { return }
        let unknown = locked { _ -> Bool in if case .unknown = tree { return true } else { return false } }
        guard unknown else { return }
        try listings.run(Self.wholeTree) { () throws(Errno) in try prefetchTree() }
    }

    /// One recursive listing of the whole tree, abandoned once it passes the entry cap. A no-op
    /// once the tree is known (a listing that ran meanwhile).
    private func prefetchTree() throws(Errno) {
        guard locked({ _ -> Bool in if case .unknown = tree { return true } else { return false } }) else { return }
        let started = clock.now()
        let generation = locked { $0.newGeneration() }
        let stamp = fetchStamp()
        var page: RemoteListPage
        var listed: [RemoteEntry] = []
        do throws(RemoteError) {
            page = try remote.listFolder(path: "", recursive: true, limit: config.listPageSize)
            var seen = page.changes.count
            try applyInSlices(page.changes, generation: generation, since: stamp)
            listed += page.changes.upserts
            while page.hasMore {
                if seen >= config.recursivePrefetchMaxEntries {
                    lock.lock(); tree = .perFolder; lock.unlock()
                    log.info("tree has more than \(config.recursivePrefetchMaxEntries) entries: listing folder by folder")
                    return
                }
                yieldToEagerListings()
                page = try remote.listFolderContinue(cursor: page.cursor)
                seen += page.changes.count
                try applyInSlices(page.changes, generation: generation, since: stamp)
                listed += page.changes.upserts
            }
            log.debug("prefetched the whole tree: \(seen) entries")
        } catch {
            log.warning("listing the tree failed: \(error)")
            throw Self.listingErrno(error)
        }
        let cursor = page.cursor
        let done: Void? = applyingFetched(since: stamp) { changed in
            table.sweepAll(olderThan: generation, sparing: table.subtrees(changed))
            table.setAllListed(at: started)
            tree = .recursive(cursor: cursor, refreshedAt: started)
            completeListing = (listed, cursor)
            treeEverListed = true
        }
        if done == nil { throw Self.listingErrno(Self.localChurn) }
    }

    /// The last complete recursive listing with its cursor, once (for the persistent store).
    func takeListing() -> (entries: [RemoteEntry], cursor: String)? {
        lock.lock(); defer { lock.unlock() }
        defer { completeListing = nil }
        return completeListing
    }

    /// Brings the whole tree up to date from the recursive listing's cursor.
    private func refreshTree(from cursor: String) throws(Errno) {
        let started = clock.now()
        let stamp = fetchStamp()
        do throws(RemoteError) {
            var page = try remote.listFolderContinue(cursor: cursor)
            try apply(page.changes, generation: 0, since: stamp)
            while page.hasMore {
                page = try remote.listFolderContinue(cursor: page.cursor)
                try apply(page.changes, generation: 0, since: stamp)
            }
            lock.lock()
            tree = .recursive(cursor: page.cursor, refreshedAt: started)
            lock.unlock()
        } catch .cursorReset {
            log.info("the tree's cursor was reset: listing again")
            lock.lock(); tree = .unknown; lock.unlock()
        } catch {
            log.warning("refreshing the tree failed: \(error)")
            throw Self.listingErrno(error)
        }
    }

    /// One folder, all pages, then the children it no longer has are swept.
    private func listFolder(_ dir: InodeNumber, path: String) throws(Errno) {
        let started = clock.now()
        let generation = locked { $0.newGeneration() }
        let stamp = fetchStamp()
        do throws(RemoteError) {
            var page = try remote.listFolder(path: path, recursive: false, limit: config.listPageSize)
            try applyChildren(page.changes, of: dir, generation: generation, since: stamp)
            while page.hasMore {
                page = try remote.listFolderContinue(cursor: page.cursor)
                try applyChildren(page.changes, of: dir, generation: generation, since: stamp)
            }
        } catch {
            switch error {
            case .notFound, .notFolder:
                // Gone from Dropbox, unless the mount moved or made it there since the call.
                applyingFetched(since: stamp) { changed in
                    if !changed.covers(path), table.path(of: dir) == path { table.detach(dir) }
                }
            default: log.warning("listing \(path.isEmpty ? "/" : path) failed: \(error)")
            }
            throw Self.listingErrno(error)
        }
        if !markListed(dir, generation: generation, since: stamp, started: started) { throw Self.listingErrno(Self.localChurn) }
    }

    /// Every page of one listing, and the cursor it ended with.
    func listAllPages(path: String, recursive: Bool) throws(RemoteError) -> (changes: [RemoteChange], cursor: String) {
        var page = try remote.listFolder(path: path, recursive: recursive, limit: config.listPageSize)
        var changes = page.changes
        while page.hasMore {
            page = try remote.listFolderContinue(cursor: page.cursor)
            changes += page.changes
        }
        return (changes, page.cursor)
    }

    /// The end of a folder's listing: the children it no longer has are swept and the folder is
    /// complete as of `started`. False if the mount changed too much meanwhile (ask again).
    private func markListed(_ dir: InodeNumber, generation: UInt64, since stamp: LocalChangeLog.Stamp, started: Double) -> Bool {
        let done: Void? = applyingFetched(since: stamp) { changed in
            table.sweepChildren(of: dir, olderThan: generation, sparing: table.subtrees(changed))
            table.setListed(dir, at: started)
        }
        return done != nil
    }

    /// Waits (up to a second) while folders listed on their own are in flight, and for 30 ms
    /// after the last one ended (a walk down a path lists the next folder a moment later):
    /// someone waits for each of those (a lookup, a readdir), while the whole-tree listing is a
    /// prefetch. Its next page would otherwise compete with them on the wire, at the server, and
    /// for `lock` while applied (traces at 20 ms: one level of a cold `stat` took 2–3 round
    /// trips while a page was served).
    private func yieldToEagerListings() {
        let deadline = Date(timeIntervalSinceNow: 1)
        let quiet: TimeInterval = 0.03
        lock.lock(); defer { lock.unlock() }
        while Date() < deadline {
            if eagerListingsInFlight > 0 {
                _ = lock.wait(until: deadline)
            } else {
                let quietUntil = lastEagerListingEnded.addingTimeInterval(quiet)
                guard Date() < quietUntil else { return }
                _ = lock.wait(until: min(quietUntil, deadline))
            }
        }
    }

    /// `apply` a few hundred entries at a time, letting go of `lock` in between, so lookups
    /// answered from other listings do not wait for a whole 2000-entry page.
    private func applyInSlices(_ changes: [RemoteChange], generation: UInt64, since stamp: LocalChangeLog.Stamp) throws(RemoteError) {
        let slice = 250
        for start in stride(from: 0, to: changes.count, by: slice) {
            try apply(Array(changes[start..<min(changes.count, start + slice)]), generation: generation, since: stamp)
        }
    }

    /// Applies listing or feed entries, except those the mount changed itself since `stamp`
    /// and the halfway steps of its own case-only renames.
    private func apply(_ changes: [RemoteChange], generation: UInt64, since stamp: LocalChangeLog.Stamp) throws(RemoteError) {
        let done: Void? = applyingFetched(since: stamp) { changed in
            for change in changes where !changed.covers(change) && !isOwnCaseRenameStep(change) {
                applyFetched(change, generation: generation)
            }
        }
        if done == nil { throw Self.localChurn }
    }

    private func applyChildren(_ changes: [RemoteChange], of dir: InodeNumber, generation: UInt64,
                               since stamp: LocalChangeLog.Stamp) throws(RemoteError) {
        let done: Void? = applyingFetched(since: stamp) { changed in
            for change in changes where !changed.covers(change) {
                switch change {
                case .upsert(let entry): upsertFetched(entry, under: dir, generation: generation)
                case .deleted: table.apply(change, generation: generation)
                }
            }
        }
        if done == nil { throw Self.localChurn }
    }

    // MARK: Answers from Dropbox reaching the tree

    /// Applies a listing's or the feed's change (lock held). A file rev it brings, of a file whose
    /// own commits `ShownRevisions` orders, is noted after them: an answer not skipped for a newer
    /// change of ours came after our commits, so a feed still behind them must not take the file
    /// back from it (`aFeedBehindNeverTakesAFileBackFromAnotherClientsVersionAFetchShowed`).
    @discardableResult
    func applyFetched(_ change: RemoteChange, generation: UInt64) -> InodeNumber? {
        if case .upsert(let entry) = change, let rev = entry.rev { shownRevisions.noteIfKept(rev, of: entry.id) }
        return table.apply(change, generation: generation)
    }

    /// `applyFetched` for an entry whose folder is known (a folder's listing, a lookup).
    @discardableResult
    func upsertFetched(_ entry: RemoteEntry, under parent: InodeNumber, generation: UInt64) -> InodeNumber? {
        if let rev = entry.rev { shownRevisions.noteIfKept(rev, of: entry.id) }
        return table.upsert(entry, under: parent, generation: generation)
    }

    // MARK: The mount's own changes (LocalChangeLog)

    /// An answer that overlapped more local changes than the log keeps: asked again.
    static let localChurn = RemoteError.unavailable("the mount changed too much while listing; try again")

    /// Where the log stands before a fetch from Dropbox.
    func fetchStamp() -> LocalChangeLog.Stamp { locked { _ in localChanges.stamp } }

    /// Runs `body` with the lock held, once the local changes that were in flight when the
    /// answer arrived are done, with the subtrees changed locally since `stamp`: what the body
    /// applies must skip them. nil (`body` not run) if the log no longer reaches back to `stamp`.
    @discardableResult
    func applyingFetched<T, E: Error>(since stamp: LocalChangeLog.Stamp,
                                      _ body: (ChangedPaths) throws(E) -> T) throws(E) -> T? {
        lock.lock()
        defer { lock.unlock() }
        let arrived = localChanges.latestToken
        while localChanges.hasInFlight(beganBy: arrived) { lock.wait() }
        guard let changed = localChanges.changed(since: stamp) else {
            log.info("the mount changed too much while an answer from Dropbox was on its way: asking again")
            return nil
        }
        return try body(changed)
    }

    /// Before a change of the mount's own reaches Dropbox (a namespace call): answers fetched
    /// meanwhile wait for it to end.
    func beginLocalChange() -> LocalChangeLog.Token { locked { _ in localChanges.begin() } }

    /// After the tree shows the change (or it failed: `paths` empty).
    func endLocalChange(_ token: LocalChangeLog.Token, changed paths: [String]) {
        locked { _ in localChanges.end(token, changed: paths.map { InodeTable.key($0) }) }
        lock.broadcast()
    }

    /// A change already made on Dropbox whose tree update is made now (a commit event).
    func recordLocalChange(_ paths: [String]) {
        locked { _ in localChanges.record(paths.map { InodeTable.key($0) }) }
    }

    /// Queued namespace operations touching `paths`: pending until settled (LocalChangeLog).
    func addPendingOperations(_ operations: [UInt64], paths: [String]) {
        guard !operations.isEmpty else { return }
        let keys = paths.map { InodeTable.key($0) }
        locked { _ in for operation in operations { localChanges.addPending(operation, keys: keys) } }
    }

    /// The operation is settled on Dropbox (done, or undone).
    func settlePendingOperation(_ operation: UInt64) {
        locked { _ in localChanges.settle(operation) }
        lock.broadcast()
    }

    /// Waits until no queued operation of the mount's own is pending, or until `deadline`.
    func waitUntilNoPendingOperations(until deadline: Date) {
        lock.lock(); defer { lock.unlock() }
        while localChanges.pendingCount > 0, lock.wait(until: deadline) {}
    }

    /// Fetches what Dropbox has at each path (a folder with everything under it) and makes the
    /// tree show it: after a queued operation that did not go as planned (undone, or a move
    /// whose source was gone). Nodes with local bytes (pending uploads) and the folders holding
    /// them stay; paths a newer local change touches are left to it. A failed fetch leaves the
    /// tree as it is; `unanswered` are the paths Dropbox did not answer for (unreachable, 5xx,
    /// rate limited), which a caller fetches again later (`VFS.refreshInBackground`). Failures
    /// are logged at `failureLevel`.
    @discardableResult
    func refreshFromDropbox(_ paths: [String], failureLevel: LogLevel = .warning)
        -> (invalidations: [KernelInvalidation], unanswered: [String]) {
        var invalidations: [KernelInvalidation] = []
        var unanswered: [String] = []
        for path in paths {
            let stamp = fetchStamp()
            var entries: [RemoteEntry] = []
            do throws(RemoteError) {
                if let entry = try remote.metadata(path: path) {
                    entries.append(entry)
                    if entry.isFolder { entries += try listAllPages(path: path, recursive: true).changes.upserts }
                }
            } catch .notFound {
                entries = []
            } catch {
                log.log(failureLevel, "cannot fetch \(path) from Dropbox to show it as it is there: \(error)")
                switch error {
                case .unavailable, .rateLimited: unanswered.append(path)
                default: break
                }
                continue
            }
            applyingFetched(since: stamp) { changed in
                guard !changed.covers(path) else { return }
                let before = table.resolve(path: path).flatMap { ino in table[ino].map { (ino: ino, node: $0) } }
                let generation = table.newGeneration()
                for entry in entries where !changed.covers(entry.pathDisplay) {
                    applyFetched(.upsert(entry), generation: generation)
                }
                if let ino = table.resolve(path: path) {
                    table.sweepSubtree(ino, olderThan: generation, sparing: table.subtrees(changed))
                }
                invalidations += Self.whatChanged(at: path, before: before, in: table)
            }
        }
        return (invalidations, unanswered)
    }

    /// What the kernel must forget of `path` after a refresh: nothing if its node is as it was
    /// (a file with pending local bytes, say: telling the kernel would drop pages that hold a
    /// write still on its way to us, `pagesFollowLocalWrites`), else its inode or its name.
    static func whatChanged(at path: String, before: (ino: InodeNumber, node: Node)?,
                                    in table: InodeTable) -> [KernelInvalidation] {
        let now = table.resolve(path: path)
        guard let before else {
            guard let now, let node = table[now] else { return [] }
            return [.entry(parent: node.parent, name: node.name), .inode(node.parent)]
        }
        guard now == before.ino, let node = table[before.ino] else {
            return [.deleted(parent: before.node.parent, child: before.ino, name: before.node.name), .inode(before.node.parent)]
        }
        // A folder's children may have changed under it: its listing is forgotten either way.
        if node.isDirectory || node.kind != before.node.kind || node.name != before.node.name { return [.inode(before.ino)] }
        return []
    }

    private static func listingErrno(_ error: RemoteError) -> Errno {
        switch error {
        case .notFound: .noEntry
        case .notFolder: .notDirectory
        case .auth: .accessDenied
        default: .io
        }
    }
}
