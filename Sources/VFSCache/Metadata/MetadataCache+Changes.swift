/// Applying Dropbox's change feed to the metadata tree, for the change watcher: each change says
/// what the kernel must forget (`KernelInvalidation`) and which cached revs are garbage; a cursor
/// reset relists the whole tree once; and a tree saved by the persistent store (`MetadataStore`)
/// can be imported at mount time.
///
/// Rules (docs/VFSCACHE.md, "Change feed and persistence"):
/// - an upsert with the rev (and size) we already hold is our own echo or a duplicate: no invalidation;
/// - nodes whose truth is local (`Node.local != .remote`, pending writes) are never overwritten
///   or removed by the feed: the write-back engine's conflict rule settles them at commit;
/// - a file never goes back to a rev that came before the one the tree shows, as far as the tree
///   knows their order (`ShownRevisions`: the revs of our own commits and conflicts the feed has
///   not passed yet): the feed reports each version in turn, and a page may end between two;
/// - a batch fetched before one of the mount's own changes skips the paths that change touched
///   (`LocalChangeLog`): the tree already has their newer state; a skipped change the tree does
///   not show may be another client's, newer still, and is looked up again (`recheck`);
/// - everything runs under `MetadataCache.lock`, like the listings.
import Foundation

extension MetadataCache {
    /// What applying a batch of changes did.
    struct AppliedChanges {
        var invalidations: [KernelInvalidation] = []
        /// Cached blocks of these (file id, rev) pairs can never be read again.
        var staleRevs: [(fileID: String, rev: String)] = []
        /// The changes that reached the tree, for the persistent store.
        var applied: [RemoteChange] = []
        /// Paths whose change was skipped for one of the mount's own (fetched before it) while
        /// the tree shows something else: the change may be another client's, made after the
        /// data the mount's change applied, so they are looked up again (`refreshFromDropbox`).
        var recheck: [String] = []
    }

    /// Applies one batch of the feed, fetched after `stamp`, then records `cursor` as the tree's
    /// (when the whole tree is held). nil (nothing applied) if the batch overlapped more local
    /// changes than the log keeps: fetch it again.
    func applyFeed(_ changes: [RemoteChange], cursor: String, since stamp: LocalChangeLog.Stamp) -> AppliedChanges? {
        let now = clock.now()
        return applyingFetched(since: stamp) { changed in
            var result = AppliedChanges()
            let madeAgain = Self.filesMadeAgain(changes)
            for (index, change) in changes.enumerated() {
                if !changed.covers(change) {
                    if madeAgain.contains(index), case .deleted(_, let path) = change,
                       let ino = table.resolve(path: path), table[ino]?.file != nil {
                        // A file deleted and made again in this batch keeps its node, updated by
                        // the entry that follows: the kernel's inode and open handles stay valid.
                        result.applied.append(change)
                        continue
                    }
                    applyOne(change, into: &result)
                } else if let path = disagreeingPath(change) {
                    result.recheck.append(path)
                }
                // Applied or not, the feed is past the revs of ours noted before this one.
                if case .upsert(let entry) = change, let rev = entry.rev { shownRevisions.passed(rev, of: entry.id) }
            }
            if case .recursive = tree { tree = .recursive(cursor: cursor, refreshedAt: now) }
            return result
        }
    }

    /// Indexes of the deletions in `changes` whose path's next change in the batch makes a file
    /// there again (Dropbox may report a path deleted and made again as both: change_feed.py).
    static func filesMadeAgain(_ changes: [RemoteChange]) -> Set<Int> {
        var nextIsFile: [String: Bool] = [:]   // by path key: whether the next change is a file's upsert
        var found: Set<Int> = []
        for (index, change) in changes.enumerated().reversed() {
            switch change {
            case .upsert(let entry):
                nextIsFile[InodeTable.key(entry.pathDisplay)] = !entry.isFolder
            case .deleted(_, let pathDisplay):
                let key = InodeTable.key(pathDisplay)
                if nextIsFile[key] == true { found.insert(index) }
                nextIsFile[key] = false
            }
        }
        return found
    }

    /// The path of a change the tree does not already show (our own commit's echo does show),
    /// for a change skipped because a change of the mount's own touched its path (lock held).
    private func disagreeingPath(_ change: RemoteChange) -> String? {
        switch change {
        case .upsert(let entry):
            guard let ino = table.resolve(path: entry.pathDisplay), let node = table[ino] else { return entry.pathDisplay }
            if entry.isFolder { return node.isDirectory ? nil : entry.pathDisplay }
            return node.file?.rev == entry.rev ? nil : entry.pathDisplay
        case .deleted(_, let pathDisplay):
            return table.resolve(path: pathDisplay) == nil ? nil : pathDisplay
        }
    }

    private func applyOne(_ change: RemoteChange, into result: inout AppliedChanges) {
        if isOwnCaseRenameStep(change) { return }
        switch change {
        case .upsert(let entry):
            // A child may come before its parent: the missing folders are made (InodeTable+Parents).
            var created: [(parent: InodeNumber, name: String)] = []
            guard !entry.pathDisplay.isEmpty,
                  let parent = table.folderCreatingMissing(path: InodeTable.parentPath(entry.pathDisplay), generation: 0,
                                                           created: &created) else { return }
            for folder in created {
                result.invalidations.append(.entry(parent: folder.parent, name: folder.name))
                result.invalidations.append(.inode(folder.parent))
            }
            let key = InodeTable.key(entry.name)
            if let existing = table.child(of: parent, key: key), let node = table[existing] {
                guard node.local == .remote else {
                    // Debug, not info: it fires for every echo of our own commits while a later
                    // version is still pending (a file written often logs it each time); the
                    // engine logs what matters itself (a conflict, a refused upload).
                    log.debug("remote change to \(entry.pathDisplay) left to the write-back engine (local changes pending)")
                    return
                }
                if node.isDirectory != entry.isFolder {
                    result.invalidations.append(.deleted(parent: parent, child: existing, name: node.name))
                    collectRevs(under: existing, into: &result.staleRevs)
                } else if let old = node.file {
                    if let rev = entry.rev, shownRevisions.isEarlier(rev, than: old.rev, of: entry.id) {
                        // The feed reports each commit in order, and a page may end between two:
                        // an earlier commit of ours after the tree showed a later one is old news.
                        log.debug("remote change to \(entry.pathDisplay) skipped: rev \(rev) is older than the rev \(old.rev) shown")
                        return
                    }
                    if old.rev == entry.rev && old.size == entry.size && node.name == entry.name {
                        // Our own upload's echo, or a feed entry we already applied: nothing for
                        // the kernel to forget (it is still saved, in case the store lags).
                        upsertFetched(entry, under: parent, generation: 0)
                        result.applied.append(change)
                        return
                    }
                    if old.rev != entry.rev {
                        result.invalidations.append(.inode(existing))
                        if let id = node.id { result.staleRevs.append((id, old.rev)) }
                    }
                    if node.name != entry.name { result.invalidations.append(.entry(parent: parent, name: node.name)) }
                } else {
                    if node.name == entry.name {
                        upsertFetched(entry, under: parent, generation: 0)
                        result.applied.append(change)
                        return
                    }
                    result.invalidations.append(.entry(parent: parent, name: node.name))
                }
            } else {
                result.invalidations.append(.entry(parent: parent, name: entry.name))
                result.invalidations.append(.inode(parent))
            }
            upsertFetched(entry, under: parent, generation: 0)
            result.applied.append(change)
        case .deleted(_, let pathDisplay):
            guard !pathDisplay.isEmpty, let ino = table.resolve(path: pathDisplay), let node = table[ino] else { return }
            guard node.local == .remote else {
                log.debug("remote delete of \(pathDisplay) left to the write-back engine (local changes pending)")
                return
            }
            result.invalidations.append(.deleted(parent: node.parent, child: ino, name: node.name))
            result.invalidations.append(.inode(node.parent))
            collectRevs(under: ino, into: &result.staleRevs)
            table.detach(ino)
            result.applied.append(change)
        }
    }

    private func collectRevs(under ino: InodeNumber, into revs: inout [(fileID: String, rev: String)]) {
        revs += StaleRevision.all(under: ino, in: table).map { ($0.fileID, $0.rev) }
    }

    /// After a cursor reset: one recursive listing replaces the tree (nodes the kernel knows keep
    /// their inode when unchanged). Returns what changed for the kernel, and the complete listing
    /// with its cursor (for the persistent store).
    func relistTree() throws(RemoteError) -> (AppliedChanges, listing: [RemoteEntry], cursor: String) {
        let started = clock.now()
        let stamp = fetchStamp()
        let (changes, cursor) = try listAllPages(path: "", recursive: true)
        let applied = applyingFetched(since: stamp) { changed in
            applyRelisting(changes, cursor: cursor, started: started, changed: changed)
        }
        guard let applied else { throw MetadataCache.localChurn }
        return (applied, changes.upserts, cursor)
    }

    /// The tree after a relisting (lock held): the listing replaces it, except what the mount
    /// changed itself meanwhile.
    private func applyRelisting(_ changes: [RemoteChange], cursor: String, started: Double, changed: ChangedPaths) -> AppliedChanges {
        // What the kernel may hold: attached nodes it has a reference to.
        var known: [(ino: InodeNumber, parent: InodeNumber, name: String, rev: String?)] = []
        for (ino, node) in table.nodes where node.lookupCount > 0 && node.isAttached && ino != rootInode {
            known.append((ino, node.parent, node.name, node.file?.rev))
        }
        let generation = table.newGeneration()
        for change in changes where !changed.covers(change) { applyFetched(change, generation: generation) }
        table.sweepAll(olderThan: generation, sparing: table.subtrees(changed))
        table.setAllListed(at: started)
        tree = .recursive(cursor: cursor, refreshedAt: started)

        var result = AppliedChanges()
        result.applied = changes
        for item in known {
            guard let now = table[item.ino], now.isAttached else {
                result.invalidations.append(.deleted(parent: item.parent, child: item.ino, name: item.name))
                continue
            }
            if now.file?.rev != item.rev || now.name != item.name {
                result.invalidations.append(.inode(item.ino))
                if let rev = item.rev, let id = now.id, rev != now.file?.rev { result.staleRevs.append((id, rev)) }
            }
            if now.isDirectory { result.invalidations.append(.inode(item.ino)) }
        }
        return result
    }

    /// A per-folder tree after a cursor reset: every folder is relisted on its next access.
    func forgetListings() -> [KernelInvalidation] {
        lock.lock()
        defer { lock.unlock() }
        var folders: [KernelInvalidation] = []
        for (ino, node) in table.nodes where node.isDirectory {
            table.setListed(ino, at: -.infinity)   // listed "never": relisted on next access
            if node.lookupCount > 0 || ino == rootInode { folders.append(.inode(ino)) }
        }
        return folders
    }

    func setWatched(_ value: Bool) {
        lock.lock(); watched = value; lock.unlock()
    }

    /// True once the whole tree is held (so it can be persisted and kept by the feed).
    var holdsWholeTree: Bool {
        lock.lock(); defer { lock.unlock() }
        if case .recursive = tree { return true }
        return false
    }

    // MARK: Persistence

    /// Loads a persisted tree (parents before children) and its cursor. The tree counts as fresh
    /// now: the watcher applies the delta since `cursor` at once, and while it is connected the
    /// tree needs no TTL refresh.
    func importTree(_ entries: [RemoteEntry], cursor: String) {
        let now = clock.now()
        lock.lock()
        defer { lock.unlock() }
        for entry in entries { table.apply(.upsert(entry), generation: 0) }
        table.setAllListed(at: now)
        tree = .recursive(cursor: cursor, refreshedAt: now)
    }
}
