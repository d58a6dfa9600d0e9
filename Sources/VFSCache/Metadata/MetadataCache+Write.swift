/// The write side's changes to the metadata tree: local files that exist before Dropbox knows
/// them, local sizes and times while an upload is pending, the namespace changes of mkdir,
/// unlink, rmdir and rename, and the commit events that turn a dirty node back into a mirror of
/// the server. Each method is one short critical section on the cache's lock.
import Foundation

extension MetadataCache {
    /// The child of `parent` called `name` (any case) without taking a lookup reference, after
    /// making sure the folder's listing is fresh. nil when absent.
    func child(of parent: InodeNumber, named name: String) throws(Errno) -> Node? {
        try ensureListed(parent)
        return locked { table in table.child(of: parent, key: InodeTable.key(name)).flatMap { table[$0] } }
    }

    /// A new file that only exists locally so far, with one lookup reference (for `create`).
    func insertLocalFile(parent: InodeNumber, name: String, modified: Date) throws(Errno) -> Node {
        try locked { table throws(Errno) -> Node in
            guard table[parent]?.isDirectory == true else { throw .noEntry }
            let key = InodeTable.key(name)
            guard table.child(of: parent, key: key) == nil else { throw .exists }
            let ino = table.nextIno
            table.nextIno += 1
            var node = Node(ino: ino, parent: parent, name: name,
                            kind: .file(Node.FileMetadata(size: 0, rev: "", contentHash: nil, modified: Self.wholeSeconds(modified))), id: nil)
            node.local = .dirty
            node.lookupCount = 1
            table.nodes[ino] = node
            table.nodes[parent]!.children[key] = ino
            table.clearNegative(key, in: parent)
            return node
        }
    }

    /// Puts a file node the tree dropped (deleted elsewhere) back at `path`, showing `file` (the
    /// version an open of it read): for a write through that open, since an edit wins over a
    /// delete. Throws ENOENT if the folder is gone, EEXIST if something else has the name now.
    func reattach(_ ino: InodeNumber, at path: String, file: Node.FileMetadata) throws(Errno) {
        try locked { table throws(Errno) in
            guard var node = table[ino], node.parent == 0, !node.isDirectory else { throw .noEntry }
            guard let parent = table.resolve(path: InodeTable.parentPath(path)), table[parent]?.isDirectory == true else {
                throw .noEntry
            }
            let name = InodeTable.lastName(path)
            let key = InodeTable.key(name)
            guard !name.isEmpty, table.child(of: parent, key: key) == nil else { throw .exists }
            node.parent = parent
            node.name = name
            node.kind = .file(file)
            table.nodes[ino] = node
            table.nodes[parent]!.children[key] = ino
            table.clearNegative(key, in: parent)
        }
    }

    /// A folder made by mkdir, before Dropbox has it (its creation is queued), with one lookup
    /// reference. A queued operation's pending paths keep listings and the feed from removing it;
    /// it counts as listed (it is empty), so lookups inside it ask nobody. A folder already there
    /// (made elsewhere meanwhile, or by the feed) is that folder.
    func insertLocalFolder(parent: InodeNumber, name: String) throws(Errno) -> Node {
        let now = clock.now()
        return try locked { table throws(Errno) -> Node in
            guard table[parent]?.isDirectory == true else { throw .noEntry }
            let key = InodeTable.key(name)
            if let existing = table.child(of: parent, key: key) {
                guard table[existing]?.isDirectory == true else { throw .exists }
                table.addLookup(existing)
                return table[existing]!
            }
            let ino = table.nextIno
            table.nextIno += 1
            var node = Node(ino: ino, parent: parent, name: name, kind: .directory, id: nil)
            node.flags = table[parent]!.flags.intersection(.readOnly)
            node.lookupCount = 1
            table.nodes[ino] = node
            table.nodes[parent]!.children[key] = ino
            table.clearNegative(key, in: parent)
            table.setListed(ino, at: now)
            return node
        }
    }

    /// Shows a namespace operation read back from the journal at start (before the mount serves):
    /// as if it had just been made. Nodes the kernel does not know yet take no lookup reference.
    func applyQueued(_ operation: NamespaceOperationSnapshot) {
        let now = clock.now()
        locked { table in
            switch operation.kind {
            case .mkdir:
                var created: [(parent: InodeNumber, name: String)] = []
                if let ino = table.folderCreatingMissing(path: operation.path, generation: 0, created: &created) {
                    if !created.isEmpty { table.setListed(ino, at: now) }
                }
            case .delete, .deleteFolder:
                if let ino = table.resolve(path: operation.path), table[ino]?.local == .remote { table.detach(ino) }
            case .move:
                guard let target = operation.target, let ino = table.resolve(path: operation.path), var node = table.nodes[ino] else { return }
                var created: [(parent: InodeNumber, name: String)] = []
                guard let newParent = table.folderCreatingMissing(path: InodeTable.parentPath(target), generation: 0, created: &created),
                      newParent != ino else { return }
                let name = InodeTable.lastName(target)
                let key = InodeTable.key(name)
                if let existing = table.child(of: newParent, key: key), existing != ino { table.detach(existing) }
                if node.parent != 0 { table.nodes[node.parent]?.children[node.key] = nil }
                node.parent = newParent
                node.name = name
                table.nodes[ino] = node
                table.nodes[newParent]!.children[key] = ino
                table.clearNegative(key, in: newParent)
            }
        }
    }

    /// Files and folders at and under `ino` in the tree (what a move of it involves, as far as
    /// the tree knows).
    func subtreeCount(_ ino: InodeNumber) -> Int {
        locked { table in
            var count = 0
            var stack = [ino]
            while let current = stack.popLast() {
                guard let node = table[current] else { continue }
                count += 1
                stack.append(contentsOf: node.children.values)
            }
            return count
        }
    }

    /// A period of local writes begins for `ino` at `path`. Called by the engine's `beginWrite`
    /// under its lock, so the tree shows local bytes from the moment the engine holds them: no
    /// feed batch or listing applied while the staging file is filled from Dropbox removes or
    /// overwrites the node (another client's delete then loses to the edit, as docs/SEMANTICS.md
    /// says; `aDeleteElsewhereAppliedWhileATruncateFillsTheFileLeavesTheEditStanding`). False if
    /// the node is no longer at `path`. Lock order: the engine's lock, then the tree's.
    func beginLocal(_ ino: InodeNumber, at path: String) -> Bool {
        locked { table in
            guard table.path(of: ino) == path, var node = table.nodes[ino], node.file != nil else { return false }
            node.local = .dirty
            table.nodes[ino] = node
            return true
        }
    }

    /// A period of writes begun by `beginLocal` on a file that mirrored Dropbox was given up
    /// before anything was staged (its fill failed): the node mirrors Dropbox again.
    func abandonLocal(_ ino: InodeNumber) {
        locked { table in
            guard var node = table.nodes[ino] else { return }
            node.local = .remote
            table.nodes[ino] = node
        }
    }

    /// Marks a file as holding local bytes of `size` (and `modified`, if given).
    func setLocal(_ ino: InodeNumber, size: UInt64, modified: Date? = nil) {
        locked { table in
            guard var node = table.nodes[ino], var file = node.file else { return }
            file.size = size
            if let modified { file.modified = Self.wholeSeconds(modified) }
            node.kind = .file(file)
            node.local = .dirty
            table.nodes[ino] = node
        }
    }

    /// The file at `path` was committed as `entry`. Unless newer local bytes are pending
    /// (`stillDirty`), the node mirrors the server again. Returns the rev the commit replaced,
    /// whose cached blocks no open can ask for any more (`StaleRevision`).
    @discardableResult
    func applyCommitted(path: String, entry: RemoteEntry, stillDirty: Bool) -> [StaleRevision] {
        locked { table in
            guard let ino = table.resolve(path: path), var node = table.nodes[ino], let old = node.file else { return [] }
            let stale = StaleRevision.replaced(old, id: node.id, by: entry)
            node.id = entry.id
            if let rev = entry.rev { shownRevisions.note(rev, of: entry.id) }
            if !stillDirty {
                node.kind = Node.Kind(entry)
                node.local = .remote
            }
            table.nodes[ino] = node
            return stale
        }
    }

    /// After a conflict: `path` shows the server's version again (`.some(nil)` if it is gone, nil
    /// if unknown), unless newer local bytes are pending there (`stillDirty`: their own commit
    /// settles them), and our version appears as `copy`. Returns the revs `path` no longer shows,
    /// and what the kernel must forget: the path's attributes (it holds our size) and the copy's
    /// name.
    func applyConflict(path: String, remoteVersion: RemoteEntry??, stillDirty: Bool = false, copy: RemoteEntry,
                       copyPath: String) -> (stale: [StaleRevision], invalidations: [KernelInvalidation]) {
        locked { table in
            var stale: [StaleRevision] = []
            var invalidations: [KernelInvalidation] = []
            if !stillDirty, let ino = table.resolve(path: path), var node = table.nodes[ino] {
                let before = (ino: ino, node: node)
                node.local = .remote
                table.nodes[ino] = node
                switch remoteVersion {
                case .some(.some(let entry)):
                    if let old = node.file { stale = StaleRevision.replaced(old, id: node.id, by: entry) }
                    if let rev = entry.rev { shownRevisions.note(rev, of: entry.id) }
                    if let parent = table.resolve(path: InodeTable.parentPath(path)) { table.upsert(entry, under: parent, generation: 0) }
                case .some(.none):
                    stale = StaleRevision.all(under: ino, in: table)
                    table.detach(ino)
                case .none:
                    break
                }
                invalidations += Self.whatChanged(at: path, before: before, in: table)
            }
            if let parent = table.resolve(path: InodeTable.parentPath(copyPath)) {
                let before = table.resolve(path: copyPath).flatMap { ino in table[ino].map { (ino: ino, node: $0) } }
                table.upsert(copy, under: parent, generation: 0)
                invalidations += Self.whatChanged(at: copyPath, before: before, in: table)
            }
            return (stale, invalidations)
        }
    }

    /// A folder (or file) the server just created under `parent`, with one lookup reference.
    func insertRemote(_ entry: RemoteEntry, under parent: InodeNumber) throws(Errno) -> Node {
        try locked { table throws(Errno) -> Node in
            guard let ino = table.upsert(entry, under: parent, generation: 0) else { throw .noEntry }
            table.addLookup(ino)
            return table[ino]!
        }
    }

    /// Removes a node from the tree (unlink, rmdir). Returns the revs it showed.
    @discardableResult
    func remove(_ ino: InodeNumber) -> [StaleRevision] {
        locked { table in
            let stale = StaleRevision.all(under: ino, in: table)
            if var node = table.nodes[ino] {
                node.local = .remote
                table.nodes[ino] = node
            }
            table.detach(ino)
            return stale
        }
    }

    /// Moves `ino` to `newParent` as `newName`, replacing whatever was there. `entry` (the
    /// server's answer to the move, if any) updates a clean file's rev and id.
    /// Returns the revs no longer shown: the replaced file's, and the moved file's if the move
    /// gave it a new one.
    @discardableResult
    func move(_ ino: InodeNumber, to newParent: InodeNumber, name newName: String, entry: RemoteEntry?) -> [StaleRevision] {
        locked { table in
            guard var node = table.nodes[ino], table.nodes[newParent]?.isDirectory == true else { return [] }
            var stale: [StaleRevision] = []
            let key = InodeTable.key(newName)
            if let existing = table.child(of: newParent, key: key), existing != ino {
                stale = StaleRevision.all(under: existing, in: table)
                if var other = table.nodes[existing] { other.local = .remote; table.nodes[existing] = other }
                table.detach(existing)
            }
            if node.parent != 0 { table.nodes[node.parent]?.children[node.key] = nil }
            node.parent = newParent
            node.name = newName
            if let entry {
                if node.local == .remote, !entry.isFolder, let old = node.file {
                    stale += StaleRevision.replaced(old, id: node.id, by: entry)
                    node.kind = Node.Kind(entry)
                }
                node.id = entry.id
            }
            table.nodes[ino] = node
            table.nodes[newParent]!.children[key] = ino
            table.clearNegative(key, in: newParent)
            return stale
        }
    }

    /// Dropbox keeps client_modified in whole seconds: local times are shown the same way, so a
    /// file's mtime does not jump when its commit lands (vim, make and rsync compare mtimes).
    static func wholeSeconds(_ date: Date) -> Date {
        Date(timeIntervalSince1970: date.timeIntervalSince1970.rounded(.down))
    }

    /// Number of children a folder has in the tree (for rename onto a folder).
    func childCount(_ ino: InodeNumber) -> Int { locked { $0[ino]?.children.count ?? 0 } }

}

/// A revision of a file the tree no longer shows (replaced by a newer one, or the file is gone):
/// its cached blocks can only be asked for again by a handle still open on it, which fetches
/// them again by rev. The write side drops them (`BlockStore.purge`), as the change watcher does
/// for changes made elsewhere.
struct StaleRevision: Equatable {
    var fileID: String
    var rev: String

    /// `old`'s rev, if `entry` shows another one of that file.
    static func replaced(_ old: Node.FileMetadata, id: String?, by entry: RemoteEntry) -> [StaleRevision] {
        guard let id, !old.rev.isEmpty, old.rev != entry.rev else { return [] }
        return [StaleRevision(fileID: id, rev: old.rev)]
    }

    /// The revs of every file at or under `ino`.
    static func all(under ino: InodeNumber, in table: InodeTable) -> [StaleRevision] {
        var revs: [StaleRevision] = []
        var stack = [ino]
        while let current = stack.popLast() {
            guard let node = table[current] else { continue }
            if let file = node.file, let id = node.id, !file.rev.isEmpty { revs.append(StaleRevision(fileID: id, rev: file.rev)) }
            stack.append(contentsOf: node.children.values)
        }
        return revs
    }
}
