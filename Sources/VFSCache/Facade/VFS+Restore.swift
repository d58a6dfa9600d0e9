/// Restoring a revision through the mount (`dbxfs restore`, `dbxfs undelete`): Dropbox makes an
/// older revision of a file current again (files/restore, made by the caller's closure), and the
/// tree shows it at once, without fooling the write side:
///
/// - a file with local changes that are not on Dropbox yet is refused (`localChanges`): its
///   upload would land on top of the restored revision (or become a conflicted copy of it), so
///   the user waits for it (`dbxfs sync`) and restores then;
/// - the restored entry replaces the node (the new rev, size and times): the next write to the
///   file starts from the restored bytes and commits as an update of the restored rev;
/// - the restore is a local change of the metadata cache (`LocalChangeLog`), from the remote call
///   until the tree shows it, so a feed batch or listing fetched before it cannot undo it;
/// - what the kernel holds of the old version (attributes, pages, a negative entry for an
///   undeleted name) is named in the returned invalidations, for the caller to pass to its
///   `CacheInvalidationSink` (never from inside a FUSE request).
import Foundation

/// Why a restore was not made.
public enum RevisionRestoreRefusal: Error, Sendable, Equatable {
    /// A read-only mount (no write-back engine): restores change Dropbox.
    case readOnly
    /// The file has bytes written on this mount that are not on Dropbox yet.
    case localChanges
    /// Nothing at the path (a restore needs the file there; an undelete its folder reachable).
    case notFound
    case isFolder
    /// Something is at the path already (an undelete needs it free).
    case exists
    /// Dropbox refused, or could not be reached.
    case remote(RemoteError)
    /// The tree could not be read (listing a folder on the way failed).
    case local(Errno)
}

extension VFS {
    /// Runs `restore` (the remote restore of a revision at `path`, relative to the mount root) and
    /// applies its entry to the tree. `replacing`: the file must be there (a restore); otherwise
    /// nothing may be there (an undelete). Returns the entry and what the kernel must forget.
    public func restoreRevision(at path: String, replacing: Bool, _ restore: () throws(RemoteError) -> RemoteEntry)
        throws(RevisionRestoreRefusal) -> (entry: RemoteEntry, invalidations: [KernelInvalidation]) {
        guard let writeBack else { throw .readOnly }
        // Commits the engine has made reach the tree first (their events wait on the engine's
        // queue): a file `dbxfs sync` just reported on Dropbox is no longer "local changes" here.
        writeBack.deliverPendingEvents()
        let node: Node?
        do throws(Errno) { node = try listedNode(at: path) } catch { throw .local(error) }
        if replacing {
            guard let node else { throw .notFound }
            guard !node.isDirectory else { throw .isFolder }
            let local = localFiles.existing(node.ino)
            let writing = local.map { file in file.withLock { file.writing } } ?? false
            if node.local != .remote || writing || writeBack.stagingFile(path: path) != nil { throw .localChanges }
        } else if let node {
            throw node.isDirectory ? .isFolder : .exists
        }

        let change = metadata.beginLocalChange()
        var changed: [String] = []
        defer { metadata.endLocalChange(change, changed: changed) }
        let entry: RemoteEntry
        do throws(RemoteError) { entry = try restore() } catch { throw .remote(error) }
        var invalidations: [KernelInvalidation] = []
        var stale: [StaleRevision] = []
        var restoredIno: InodeNumber?
        metadata.locked { table in
            var created: [(parent: InodeNumber, name: String)] = []
            guard let parent = table.folderCreatingMissing(path: InodeTable.parentPath(path), generation: 0,
                                                           created: &created) else { return }
            for folder in created {
                invalidations += [.entry(parent: folder.parent, name: folder.name), .inode(folder.parent)]
            }
            let name = InodeTable.lastName(path)
            if let existing = table.child(of: parent, key: InodeTable.key(name)), let current = table[existing] {
                // Written since the check: that write's commit (an update of the old rev) meets the
                // restored one and becomes a conflicted copy; the tree keeps its local bytes till then.
                guard current.local == .remote, !current.isDirectory else { return }
                if let old = current.file { stale = StaleRevision.replaced(old, id: current.id, by: entry) }
                table.upsert(entry, under: parent, generation: 0)
                table.setLastOpenedRev(existing, nil)
                restoredIno = existing
                invalidations.append(.inode(existing))
            } else {
                table.upsert(entry, under: parent, generation: 0)
                invalidations += [.entry(parent: parent, name: name), .inode(parent)]
            }
        }
        changed = [path]
        for revision in stale { blocks.purge(fileID: revision.fileID, rev: revision.rev) }
        noteTreeChanged()   // a pinned file's restored revision is fetched for offline use
        if let restoredIno, let file = localFiles.existing(restoredIno) {
            // Bytes kept from an earlier write are the old version's: a later write starts from
            // the restored revision instead.
            file.withLock { if !file.writing { file.staging = nil } }
        }
        return (entry, invalidations)
    }

    /// The node at `path` (relative to the mount root), listing the folders on the way as a
    /// lookup would; nil when a component is absent.
    func listedNode(at path: String) throws(Errno) -> Node? {
        var node = metadata.node(rootInode)
        for component in path.split(separator: "/") {
            guard let folder = node, folder.isDirectory else { return nil }
            node = try metadata.child(of: folder.ino, named: String(component))
        }
        return node
    }
}
