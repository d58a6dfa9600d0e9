/// The write side of the facade: create, write, truncate and utimens, flush, fsync and release,
/// and the namespace changes (mkdir, unlink, rmdir, rename). File bytes go to staging files of the
/// `WriteBackEngine`, which journals them at close and uploads them in the background; namespace
/// changes are journaled by the engine too (NamespaceQueue.swift) and sent to Dropbox later, in
/// order and in batches, while the tree shows them at once. Their paths are pending in the
/// metadata cache (`LocalChangeLog`) until Dropbox has them, so no listing or feed batch undoes
/// them meanwhile; one Dropbox refuses is undone and its paths fetched again. Case-only renames
/// still go to Dropbox at once (CaseOnlyRename.swift). The rules a user sees are in
/// docs/SEMANTICS.md ("Writing").
///
/// Per file, `LocalFile.lock` serialises the facade's own steps (the first write after a close
/// fills a new staging file from the old content; later writes wait for that). Lock order:
/// `LocalFile.lock` → the engine's lock / `MetadataCache.lock` (never the other way round).
import Foundation
#if canImport(Glibc)
import Glibc
#endif

extension VFS {
    /// fsync gives up (EIO) after this long; the file stays journaled and keeps uploading.
    static let fsyncTimeout: TimeInterval = 3600
    /// utimens on an already uploaded file re-uploads it with the new client_modified up to this
    /// size; above it the new time is accepted but not kept (docs/SEMANTICS.md).
    static let retimeMaxBytes: UInt64 = 64 << 20

    private func requireWriteBack() throws(Errno) -> WriteBackEngine {
        guard let writeBack else { throw .readOnly }
        return writeBack
    }

    // MARK: What Dropbox refuses to write

    /// EACCES for a change Dropbox would refuse (no_write_permission in a read-only shared
    /// folder; content written over a file it can only export), before anything is staged, so
    /// nothing waits in the journal for an upload that can never land (docs/SEMANTICS.md).
    private func refuse(_ what: String, _ path: String, _ why: String) -> Errno {
        logger.info("\(what) \(path.isEmpty ? "/" : path): refused (EACCES), \(why)")
        return .accessDenied
    }

    /// Content changes (write, truncate, utimens) to `node`.
    private func requireWritableContent(_ node: Node, _ what: String) throws(Errno) {
        let path = metadata.path(of: node.ino) ?? node.name
        if node.isExportOnly { throw refuse(what, path, "Dropbox can only export this file, not take new content for it") }
        if node.flags.contains(.readOnly), node.id != nil { throw refuse(what, path, "it is in a read-only shared folder") }
    }

    /// New entries in, or entries taken out of, the folder `ino`.
    private func requireWritableFolder(_ ino: InodeNumber, _ what: String) throws(Errno) {
        guard let folder = metadata.node(ino), folder.flags.contains(.readOnly) else { return }
        throw refuse(what, metadata.path(of: ino) ?? folder.name, "the folder is a read-only shared folder")
    }

    /// Deleting or moving `node` (out of `parent`). A file that only exists here (its upload was
    /// refused) may always leave: that is how its bytes are saved.
    private func requireRemovable(_ node: Node, from parent: InodeNumber, _ what: String) throws(Errno) {
        guard node.id != nil else { return }
        if node.flags.contains(.readOnly) {
            throw refuse(what, metadata.path(of: node.ino) ?? node.name, "it is in a read-only shared folder")
        }
        try requireWritableFolder(parent, what)
    }

    // MARK: Open, read, write

    /// Opens for writing, or for reading a file whose latest bytes are local. nil: a plain read of
    /// a clean file, which the read side handles.
    func openLocal(_ ino: InodeNumber, flags: OpenFlags) throws(Errno) -> OpenReply? {
        let wantsWrite = !flags.isDisjoint(with: [.write, .truncate, .append])
        guard let writeBack else {
            if wantsWrite { throw .readOnly }
            return nil
        }
        // A plain read of a clean file is the read side's, which refreshes the node itself:
        // decide that without a refresh of our own (no second remote call, e.g. while offline).
        if !wantsWrite, let cached = metadata.node(ino), cached.local == .remote, localFiles.existing(ino) == nil,
           let cachedPath = metadata.path(of: ino), writeBack.stagingFile(path: cachedPath) == nil {
            return nil
        }
        // Our bytes just became a conflicted copy and the tree does not show it yet: the node
        // still has our size with the rev our edit started from, and no local bytes are left to
        // read. Open once the handler has shown the version the path has now
        // (`aReadWhileAConflictIsBeingShownReadsOneWholeVersion`; writers wait in `prepareWrite`).
        if let path = metadata.path(of: ino), writeBack.hasConflictNotShown(path: path) {
            writeBack.waitUntilConflictShown(path: path)
        }
        let node: Node
        if !wantsWrite, let cached = metadata.node(ino) { node = cached } else { node = try metadata.refreshedNode(ino) }
        guard let meta = node.file else { throw .isDirectory }
        if wantsWrite { try requireWritableContent(node, "open for writing") }
        guard let path = metadata.path(of: ino) else { throw .noEntry }
        let existing = localFiles.existing(ino)
        let engineStaging = writeBack.stagingFile(path: path)
        let hasLocalBytes = node.local == .dirty || engineStaging != nil
        guard wantsWrite || hasLocalBytes else { return nil }

        let file = existing ?? localFiles.file(ino)
        if !wantsWrite, engineStaging == nil, node.local == .remote || existing?.withLock({ existing!.staging }) == nil {
            return nil   // committed meanwhile: the server's rev has the bytes
        }
        // (A clean file's pages are ours only at a rev we committed: the refresh above may
        // have found another client's, which nobody told the kernel of yet.)
        let keepPages = !flags.contains(.truncate) && (hasLocalBytes || writeBack.isOwnCommit(path: path, rev: meta.rev))
            && existing.map(pagesFollowLocalWrites) == true
        var remoteView: OpenFile?
        if !hasLocalBytes, let id = node.id, meta.size > 0 {
            remoteView = makeReader(ino, path: path, fileID: id, file: meta)
        }
        let localView = try file.withLock { () throws(Errno) -> StagingFile? in
            // A pending upload found after a restart: its bytes are the file's bytes.
            if file.staging == nil, let engineStaging {
                file.staging = engineStaging
                metadata.setLocal(ino, size: (try? engineStaging.size()) ?? meta.size)
            }
            if wantsWrite { file.writers += 1 }
            return hasLocalBytes ? file.staging : nil
        }
        let handle = WriteHandle(ino: ino, file: file, mayWrite: wantsWrite, append: flags.contains(.append), remoteView: remoteView,
                                 localView: localView)
        if wantsWrite, flags.contains(.truncate) {
            do throws(Errno) {
                try file.withLock { () throws(Errno) in
                    var current = path
                    let staging = try prepareWrite(file, path: &current, keepBytes: 0)
                    try staging.truncate(to: 0)
                    file.restartSequence()
                    writeBack.noteRewrite(path: current, staging: staging)
                    metadata.setLocal(ino, size: 0, modified: Date())
                }
                handle.noteWrite()
            } catch {
                file.withLock { file.writers -= 1 }
                throw error
            }
        }
        // A writer whose staging file needs no download is offered to the kernel (passthrough):
        // the staging file is made ready now, since its writes will not come here.
        var backing: StagingFile?
        if wantsWrite, config.passthroughWrites,
           hasLocalBytes || flags.contains(.truncate) || meta.size == 0 || meta.rev.isEmpty || file.withLock({ file.staging != nil }) {
            do throws(Errno) {
                backing = try file.withLock { () throws(Errno) -> StagingFile? in
                    var current = path
                    return file.unlinked ? nil : try prepareWrite(file, path: &current, keepBytes: nil)
                }
            } catch {
                file.withLock { file.writers -= 1 }
                throw error
            }
        }
        let id = nextHandle.add(1, ordering: .relaxed).oldValue
        localFiles.add(handle, as: id)
        // The kernel must not keep pages of an earlier version across this open, but must keep
        // those of a write in flight (`pagesFollowLocalWrites`).
        if !keepPages { kernelDropsPages(of: file) }
        return kernelWritable(OpenReply(handle: id, keepCache: keepPages), backing)
    }

    /// Whether the kernel's cached pages of the file are its current local bytes, and must be
    /// kept by a new open: true while an open of the mount writes it through the kernel's page
    /// cache (not passthrough). Such a writer's own open dropped older pages, every write since
    /// went through the page cache (passthrough opens cannot coexist with it: PassthroughOpens),
    /// and the file's remote changes wait for its commit. An open that drops them instead
    /// (keep_cache off) can drop a page holding a write still on its way to us; a read then
    /// fills the page from bytes without it, and it stays so after the write lands
    /// (`hunt_reader_prefix.py`: zeros where a write had been, read through another descriptor).
    func pagesFollowLocalWrites(_ file: LocalFile) -> Bool {
        let (writers, stale) = file.withLock { (file.writers, file.kernelPagesStale) }
        return !stale && writers > file.kernelWriters.withLock { $0.count }
    }

    /// An open of the file is answered with keep_cache off: the kernel drops its pages.
    func kernelDropsPages(of file: LocalFile?) {
        guard let file else { return }
        file.withLock { file.kernelPagesStale = false }
    }

    /// `reply` offering `staging` to the kernel for the open's writes (FUSE passthrough), except
    /// to start a new such open while the staging budget is spent (docs/WRITEBACK.md), or while
    /// the disk cache is bounded by its disk rather than its budget (a full disk must reach
    /// `writeMakingRoom`).
    private func kernelWritable(_ reply: OpenReply, _ staging: StagingFile?) -> OpenReply {
        guard let staging, let writeBack else { return reply }
        var reply = reply
        reply.backingFile = staging.url.path
        reply.backingTakesWrites = true
        reply.backingJoinOnly = writeBack.bytesNotUploaded > config.stagingBudget || blocks.disk?.isBoundByDisk == true
        return reply
    }

    /// The glue handed the open to the kernel (`FilesystemOperations.servedByKernel`): its
    /// staging file stays the engine's until the open ends, and, if it may write, the file's
    /// size and mtime are the staging file's meanwhile.
    public func servedByKernel(_ ino: InodeNumber, handle id: HandleID) {
        guard let handle = localFiles.handle(id), handle.ino == ino, let writeBack else { return }
        handle.servedByKernel.store(true, ordering: .relaxed)
        let file = handle.file
        guard let staging = file.withLock({ file.staging }) else { return }
        if let path = metadata.path(of: ino), writeBack.retainStaging(path: path, file: staging) {
            handle.retainedStaging.withLock { $0 = staging }
        }
        if handle.mayWrite {
            file.kernelWriters.withLock { $0.count += 1; $0.staging = staging }
            handle.noteWrite()
        }
    }

    /// Journals what the kernel wrote through a passthrough open, if anything changed since the
    /// last journaled close (the staging file's stamp), and shows the file's new size.
    private func journalKernelWrites(_ handle: WriteHandle, durable: Bool = true) throws(Errno) {
        let file = handle.file
        let changed = try file.withLock { () throws(Errno) -> Bool in
            guard !file.unlinked, let staging = file.staging, let path = metadata.path(of: file.ino) else { return false }
            if !file.writing {
                guard (try? staging.changeStamp()) != file.journaledStamp else { return false }
                // Changed since the last journaled close: a new period of changes (beginWrite).
                var current = path
                _ = try prepareWrite(file, path: &current, keepBytes: nil)
            }
            if let stamp = try? staging.changeStamp() { metadata.setLocal(file.ino, size: stamp.size, modified: stamp.modifiedDate) }
            return true
        }
        guard changed else { return }
        try journal(handle, force: true, durable: durable)
    }

    func readLocal<R>(_ handle: WriteHandle, ino: InodeNumber, offset: UInt64, size: Int,
                      _ body: ([UnsafeRawBufferPointer]) -> R) throws(Errno) -> R {
        guard handle.ino == ino else { throw .badFile }
        let staging = handle.file.withLock { handle.file.staging }
        guard let staging = staging ?? handle.localView.withLock({ $0 }) else {
            // Not written yet through this open: the server's bytes.
            guard let reader = handle.remoteView else { return body([]) }
            return try readRemote(reader, offset: offset, size: size, body)
        }
        // (No staging file of the file's own: the open's local bytes were let go, committed or
        // made a conflicted copy, so it reads the version it opened, from the staging file it
        // keeps open, as an open of the server's bytes reads that rev.)
        let bytes = try staging.read(at: offset, count: size)
        return bytes.withUnsafeBytes { body($0.isEmpty ? [] : [$0]) }
    }

    /// Reads through the block cache with a reader that is not in the handle table.
    private func readRemote<R>(_ reader: OpenFile, offset: UInt64, size: Int,
                               _ body: ([UnsafeRawBufferPointer]) -> R) throws(Errno) -> R {
        guard size > 0, offset < reader.size else { return body([]) }
        let end = min(offset + UInt64(size), reader.size)
        let blockSize = UInt64(config.blockSize)
        var out: [UInt8] = []
        out.reserveCapacity(Int(end - offset))
        for index in (offset / blockSize)...((end - 1) / blockSize) {
            let block = try blocks.block(reader.blockRequest(index, blockSize: config.blockSize))
            let start = index * blockSize
            let from = Int(max(offset, start) - start), to = Int(min(end, start + blockSize) - start)
            guard to <= block.count else { throw .io }
            out.append(contentsOf: UnsafeRawBufferPointer(rebasing: block.buffer[from..<to]))
        }
        return out.withUnsafeBytes { body([$0]) }
    }

    func writeLocal(_ ino: InodeNumber, handle id: HandleID, offset: UInt64, data: UnsafeRawBufferPointer) throws(Errno) -> Int {
        let writeBack = try requireWriteBack()
        guard let handle = localFiles.handle(id), handle.ino == ino, handle.mayWrite else { throw .badFile }
        // Before any lock: what it waits for (uploads, their events) may need the file's lock.
        writeBack.waitForStagingRoom(budget: config.stagingBudget, stallLimit: config.stagingStallLimit)
        let file = handle.file
        // The tree's size is set under the file's lock: the kernel sends a mapping's writeback and
        // the program's truncate at once, and a size set after letting go could undo the other's
        // (fsx: "Size error" after a TRUNCATE UP; `aWriteRacingATruncateNeverPutsBackTheSizeBeforeIt`).
        // Lock order: the file's lock, then the tree's.
        return try file.withLock { () throws(Errno) -> Int in
            let staging: StagingFile
            var path: String?
            if file.unlinked {
                guard let current = file.staging else { throw .badFile }
                staging = current
            } else {
                guard var current = metadata.path(of: ino) ?? reviveDeleted(handle) else { throw .noEntry }
                staging = try prepareWrite(file, path: &current, keepBytes: nil, openedAt: handle.remoteView,
                                           readLocal: handle.localView.withLock { $0 }, revive: { self.reviveDeleted(handle) })
                path = current
            }
            handle.localView.withLock { $0 = staging }
            let at = handle.append ? try staging.size() : offset
            // A disk filling up part way: a short write, as on a local disk (the writer's next
            // write gets ENOSPC), so what the writer was told and the file's size agree.
            let data = UnsafeRawBufferPointer(rebasing: data[..<(try writeMakingRoom(staging, at: at, data))])
            handle.noteWrite()
            file.mtime = nil
            if let path, let prefix = file.sequentialPrefix {
                if at == prefix {
                    let completed = file.extendSequence(data)
                    writeBack.noteSequentialProgress(path: path, staging: staging, contiguousBytes: prefix + UInt64(data.count),
                                                     completedBlocks: completed)
                } else {
                    file.breakSequence()
                    if at < prefix { writeBack.noteRewrite(path: path, staging: staging) }
                }
            }
            metadata.setLocal(ino, size: try staging.size(), modified: Date())
            return data.count
        }
    }

    /// A write (or truncate) through `handle`, whose file another client deleted after the open
    /// and the tree dropped: the edit wins over the delete (docs/SEMANTICS.md, "Edited here,
    /// deleted elsewhere"), so the file comes back at the name it was opened by, showing the
    /// version the open read; the write then starts from that version, and its commit
    /// (`update` of a deleted file) recreates it (`aWriteThroughAnOpenOfAFileDeletedElsewhereBringsItBack`).
    /// Nil (the write fails with ENOENT, as before) for an open that never read Dropbox's bytes,
    /// when the folder is gone too, or when something new has the name; and while a period of
    /// writes is open (its node holds local bytes, which the feed never removes). The file's lock
    /// is held.
    private func reviveDeleted(_ handle: WriteHandle) -> String? {
        guard let opened = handle.remoteView, !handle.file.writing, !handle.file.unlinked,
              let meta = metadata.node(handle.ino)?.file else { return nil }
        do throws(Errno) {
            try metadata.reattach(handle.ino, at: opened.path, file: Self.version(readBy: opened, from: meta))
        } catch {
            logger.info("\(opened.path) was deleted on Dropbox while open here; the write through that open fails: \(error)")
            return nil
        }
        logger.info("\(opened.path) was deleted on Dropbox while open here for writing; it comes back with this open's write")
        return opened.path
    }

    /// `meta` as the version `opened` read: its rev, size and content hash (the rest is the tree's).
    private static func version(readBy opened: OpenFile, from meta: Node.FileMetadata) -> Node.FileMetadata {
        var version = meta
        version.rev = opened.rev
        version.size = opened.size
        version.contentHash = opened.contentHash
        return version
    }

    /// `staging.writePrefix`, but a write the cache disk had no room for is tried once more after
    /// the disk cache let go of blocks it kept from reads (they can be downloaded again): a full
    /// cache disk fails a write only when nothing but written bytes and pinned files fill it.
    private func writeMakingRoom(_ staging: StagingFile, at offset: UInt64, _ data: UnsafeRawBufferPointer) throws(Errno) -> Int {
        var done = 0
        do throws(Errno) {
            done = try staging.writePrefix(at: offset, data)
        } catch .noSpace {
            done = 0
        }
        guard done < data.count, let disk = blocks.disk, disk.releaseSpace(for: UInt64(data.count - done)) else {
            if done == 0 { throw .noSpace }
            return done
        }
        do throws(Errno) {
            return done + (try staging.writePrefix(at: offset + UInt64(done), UnsafeRawBufferPointer(rebasing: data[done...])))
        } catch {
            if done == 0 { throw error }
            return done
        }
    }

    /// Before the first change since the last close (file lock held): `beginWrite`, and a new
    /// staging file gets the current content first (up to `keepBytes`; nil: all of it), from the
    /// previous staging file if we have it, else from Dropbox. `path` is the file's path in the
    /// tree; if a rename moved the file meanwhile, it is set to the new one.
    ///
    /// Two waits let go of the file's lock (`LocalFile.waitUnlocked`; `create` has the second
    /// too), since what they wait for needs it: the handler of a conflict event the tree does not show yet,
    /// and a rename or unlink of the path under way, whose tree update may come after the
    /// engine moved the path's bytes (a new file at the old name would take the write away from
    /// them: `aRenameRacingTheFirstWriteAfterACloseKeepsTheWriteAndTheNewName`).
    ///
    /// `openedAt`: the version the writing handle opened and read (`WriteHandle.remoteView`), for
    /// `beginWriteAndFill`'s "update R" rule; `readLocal`: the local bytes it opened instead
    /// (`WriteHandle.localView`), for the same rule once they became a conflicted copy; `revive`:
    /// the writing handle's `reviveDeleted`, for a file deleted elsewhere while the write waited.
    private func prepareWrite(_ file: LocalFile, path: inout String, keepBytes: UInt64?,
                              openedAt: OpenFile? = nil, readLocal: StagingFile? = nil,
                              revive: (() -> String?)? = nil) throws(Errno) -> StagingFile {
        if file.writing, let staging = file.staging { return staging }
        let writeBack = try requireWriteBack()
        if writeBack.hasConflictNotShown(path: path) {
            // Our last bytes just became a conflicted copy: start from the version the path shows.
            file.waitUnlocked { writeBack.waitUntilConflictShown(path: path) }
            if file.writing, let staging = file.staging { return staging }
            if file.unlinked { throw .noEntry }
        }
        for attempt in 0..<3 {
            do throws(Errno) {
                return try beginWriteAndFill(file, path: path, keepBytes: keepBytes, openedAt: openedAt, readLocal: readLocal)
            } catch .again where attempt < 2 {
                file.waitUnlocked { writeBack.waitUntilNotHeld(path: path) }
                if file.writing, let staging = file.staging { return staging }
                if file.unlinked { throw .noEntry }
                // Gone meanwhile (another client's delete, applied before the write began): a
                // handle's write brings it back, as when it was gone before (`reviveDeleted`).
                guard let current = metadata.path(of: file.ino) ?? revive?() else { throw .noEntry }
                path = current
            }
        }
        throw .again
    }

    /// `prepareWrite` once the waits are done (file lock held).
    ///
    /// "A file opened at rev R is committed as update R" (docs/SEMANTICS.md, "Conflicts"): a
    /// handle that opened the file at R and writes only after the tree learned of another
    /// client's R' writes on R (filled from R, base R), so its change, computed from R, is
    /// neither applied to R' nor committed over it: the commit conflicts and ours becomes a
    /// conflicted copy. Before, it was applied to R' and replaced it
    /// (`aHandleOpenedAtOneRevisionWritesOnThatRevisionNotOnALaterOne`). Not when R' is a commit
    /// of ours (another handle of the file wrote it: its bytes are the file's, as on a local disk).
    private func beginWriteAndFill(_ file: LocalFile, path: String, keepBytes: UInt64?, openedAt: OpenFile?,
                                   readLocal: StagingFile? = nil) throws(Errno) -> StagingFile {
        let writeBack = try requireWriteBack()
        guard let node = metadata.node(file.ino), let tree = node.file else { throw .noEntry }
        // Bytes the engine already holds for this path (pending upload, resumed after a restart)
        // are the current content: never fill over them from the server.
        if file.staging == nil { file.staging = writeBack.stagingFile(path: path) }
        // The same rule for a handle that opened our own pending bytes, when the path now shows a
        // version that is not ours: those bytes met another version on Dropbox and became a
        // conflicted copy, or were committed and then changed by someone else. The handle's change
        // was computed from ours, so it goes on ours (the staging file it read, still open), as a
        // new file, and is kept as a conflicted copy: applied to theirs, it replaced or patched
        // their bytes unseen (test_no_silent_overwrite.py;
        // `aHandleThatReadOurPendingBytesNeverWritesOnTheVersionTheyConflictedWith`,
        // `aHandleThatReadOurPendingBytesDoesNotPatchALaterVersionOfOthers`).
        var readOurs: StagingFile?
        if let readLocal, node.local == .remote, !tree.rev.isEmpty, !writeBack.isOwnCommit(path: path, rev: tree.rev) {
            readOurs = readLocal
            logger.info("\(path) shows a version this open did not read (another client's): its writes go on the bytes it read, and will be kept as a conflicted copy")
        }
        var meta = tree
        var opened: OpenFile?
        if readOurs == nil, let openedAt, file.staging == nil, node.local == .remote, !openedAt.rev.isEmpty, openedAt.rev != tree.rev,
           !writeBack.isOwnCommit(path: path, rev: tree.rev) {
            opened = openedAt
            meta = Self.version(readBy: openedAt, from: tree)
            logger.info("\(path) changed on Dropbox after it was opened for writing: the write goes on the version it opened (rev \(openedAt.rev)), and will be kept as a conflicted copy")
        }
        let base: WriteBase = readOurs != nil || meta.rev.isEmpty ? .newFile : .revision(meta.rev)
        let staging = try writeBack.beginWrite(path: path, base: base) { self.metadata.beginLocal(file.ino, at: path) }
        if staging !== file.staging {
            let wanted = min(keepBytes ?? .max, readOurs.map { (try? $0.size()) ?? 0 } ?? meta.size)
            // Our last staging file is the content only while the tree shows local bytes: once a
            // commit showed, the tree's rev is (an open reader may keep our old bytes alive, and
            // the rev may since be someone else's).
            let previous = node.local == .dirty ? file.staging : nil
            do throws(Errno) {
                if wanted > 0 {
                    if let previous {
                        try copy(from: previous, to: staging, count: wanted)
                    } else if let readOurs {
                        try copy(from: readOurs, to: staging, count: wanted)
                    } else if let opened {
                        try fetch(opened, into: staging, count: wanted)
                    } else if let id = node.id, !meta.rev.isEmpty {
                        try fetch(makeReader(file.ino, path: path, fileID: id, file: meta), into: staging, count: wanted)
                    }
                }
            } catch {
                // Never leave a half-filled staging file to be uploaded over the real one.
                logger.error("cannot fetch the current content of \(path) before writing: \(error)")
                try? writeBack.remove(path: path) { () throws(Errno) in }
                if node.local == .remote {
                    // Changes from the feed meanwhile were left to an edit that never came.
                    metadata.abandonLocal(file.ino)
                    refreshInBackground([path])
                }
                throw error == .noSpace ? .noSpace : .io
            }
            file.staging = staging
        }
        file.writing = true
        file.writePeriods += 1
        file.restartSequence()
        return staging
    }

    /// Fills a new staging file from another (holes stay holes: `StagingFile.fill`).
    private func copy(from source: StagingFile, to target: StagingFile, count: UInt64) throws(Errno) {
        var offset: UInt64 = 0
        let piece = 4 << 20
        while offset < count {
            let bytes = try source.read(at: offset, count: Int(min(UInt64(piece), count - offset)))
            if bytes.isEmpty { break }
            try target.fill(at: offset, bytes)
            offset += UInt64(bytes.count)
        }
        try target.truncate(to: offset)
    }

    /// The old bytes of a file, block by block through the block cache (with read-ahead).
    private func fetch(_ reader: OpenFile, into target: StagingFile, count: UInt64) throws(Errno) {
        let blockSize = UInt64(config.blockSize)
        let last = (count - 1) / blockSize
        let window: UInt64 = 8
        for index in 0...last {
            if index % window == 0, index < last {
                blocks.prefetch(((index + 1)...min(index + window, last)).map { reader.blockRequest($0, blockSize: config.blockSize) })
            }
            let block = try blocks.block(reader.blockRequest(index, blockSize: config.blockSize))
            let start = index * blockSize
            let length = Int(min(blockSize, count - start))
            guard length <= block.count else { throw .io }
            try target.fill(at: start, UnsafeRawBufferPointer(rebasing: block.buffer[0..<length]))
        }
        try target.truncate(to: count)
    }

    // MARK: Close, flush, fsync

    /// Journals the handle's changes (the engine's `close`): the file is then safe on disk and
    /// queued for upload. Throws ENOSPC/EIO if that failed (the bytes stay staged).
    /// `durable: false` for fsync (see `WriteBackEngine.close`).
    private func journal(_ handle: WriteHandle, force: Bool = false, durable: Bool = true) throws(Errno) {
        guard handle.wrote.exchange(false, ordering: .relaxed) || force else { return }
        do throws(Errno) { try journalFile(handle.file, durable: durable) } catch {
            handle.wrote.store(true, ordering: .relaxed)
            throw error
        }
    }

    private func journalFile(_ file: LocalFile, durable: Bool = true) throws(Errno) {
        let writeBack = try requireWriteBack()
        try file.withLock { () throws(Errno) in
            guard file.writing, !file.unlinked, let path = metadata.path(of: file.ino) else { return }
            let modified = file.mtime ?? metadata.node(file.ino)?.file?.modified
            do throws(Errno) {
                // Taken before the close reads the size: a later write shows as a new stamp.
                file.journaledStamp = try? file.staging?.changeStamp()
                file.generation = try writeBack.close(path: path, staging: file.staging, clientModified: modified, durable: durable)
            } catch {
                // A close the engine could not journal (a full cache disk) is still a close: the
                // engine holds it and retries; the next write starts a new one (beginWrite).
                if error != .badFile { file.writing = false }
                throw error
            }
            file.writing = false
        }
    }

    func flushLocal(_ ino: InodeNumber, handle id: HandleID) throws(Errno) {
        guard let handle = localFiles.handle(id), let writeBack else { return }
        if handle.mayWrite {
            if handle.servedByKernel.load(ordering: .relaxed) { try journalKernelWrites(handle) } else { try journal(handle) }
        }
        // Only to a handle that wrote: reading a file (cat, cp from the mount) whose upload
        // failed must not fail at close.
        guard handle.hasWritten.load(ordering: .relaxed) else { return }
        if let path = metadata.path(of: ino), let error = writeBack.failure(path: path, staging: handle.file.withLock({ handle.file.staging })) {
            logger.warning("\(path): an earlier close or upload of it failed (\(error)); it stays staged and is retried")
            throw error
        }
    }

    func fsyncLocal(_ ino: InodeNumber, handle id: HandleID?) throws(Errno) {
        guard let writeBack else { return }
        let handle = id.flatMap { localFiles.handle($0) }
        guard let file = handle?.file ?? localFiles.existing(ino) else { return }
        // Journaled without disk flushes: the wait below makes the bytes durable on Dropbox.
        if let handle, handle.mayWrite {
            if handle.servedByKernel.load(ordering: .relaxed) {
                try journalKernelWrites(handle, durable: false)
            } else {
                // Forced, whether or not this handle wrote: a period of writes begun by an open
                // (passthrough readies the staging file then) holds the file's pending upload
                // until it is journaled, and the wait below would wait for that upload
                // (`anFsyncThroughAWriterThatWroteNothingReturnsOnceThePendingBytesAreOnDropbox`).
                // `journalFile` journals only a file in such a period.
                try journal(handle, force: true, durable: false)
            }
        } else {
            try journalFile(file, durable: false)
        }
        // A close that could not be journaled (a full cache disk) is tried again now: fsync never
        // returns while bytes are neither journaled nor on Dropbox.
        if let path = metadata.path(of: ino), let generation = try writeBack.retryClose(path: path, staging: file.withLock { file.staging }) {
            file.withLock { file.generation = max(file.generation, generation) }
        }
        let generation = file.withLock { file.generation }
        guard generation > 0, let path = metadata.path(of: ino) else { return }
        do throws(WriteBackError) {
            try writeBack.waitUntilCommitted(path: path, staging: file.withLock { file.staging }, generation: generation,
                                             timeout: Self.fsyncTimeout)
        } catch {
            logger.warning("fsync of \(path): \(error.description(about: path))")
            // Not on Dropbox: at least on disk, as a close would have made it.
            writeBack.makeDurable(path: path, staging: file.withLock { file.staging })
            throw error.errno
        }
    }

    /// Returns false when the handle is not the write side's.
    func releaseLocal(_ ino: InodeNumber, handle id: HandleID) -> Bool {
        guard let handle = localFiles.removeHandle(id) else { return false }
        // The engine may let a staging file committed meanwhile go once this is done.
        defer { if let staging = handle.retainedStaging.withLock({ $0.take() }) { writeBack?.releaseStaging(staging) } }
        guard handle.mayWrite else { return true }
        let file = handle.file
        let kernel = handle.servedByKernel.load(ordering: .relaxed)
        let last = file.withLock { () -> Bool in
            file.writers -= 1
            return file.writers == 0
        }
        if kernel { file.kernelWriters.withLock { $0.count -= 1; if $0.count == 0 { $0.staging = nil } } }
        do throws(Errno) {
            if kernel {
                // Writes through a descriptor kept after the first close (dup), or a mapping.
                try journalKernelWrites(handle)
            }
            // The last writer also journals changes made without a handle of their own.
            try journal(handle, force: last && file.withLock { file.writing })
        } catch {
            logger.error("\(metadata.path(of: ino) ?? "inode \(ino)"): cannot queue the upload at close: \(error); the bytes stay staged and the close is retried")
        }
        // Already committed (the event came while the file was open): forget it now.
        if last, let path = metadata.path(of: ino), writeBack?.stagingFile(path: path) == nil,
           metadata.node(ino)?.local == .remote {
            localFiles.dropIfIdle(ino)
        }
        return true
    }

    // MARK: Attributes

    func setLocalAttributes(_ ino: InodeNumber, changes: AttributeChanges, handle id: HandleID?) throws(Errno) -> FileAttributes {
        let writeBack = try requireWriteBack()
        let handle = id.flatMap { localFiles.handle($0) }.flatMap { $0.ino == ino && $0.mayWrite ? $0 : nil }
        // A truncate through a handle of a file deleted elsewhere brings it back (`reviveDeleted`).
        let truncating = changes.size == nil ? nil : handle
        let revive = truncating.map { handle in { self.reviveDeleted(handle) } }
        if metadata.path(of: ino) == nil, let truncating, let revive { _ = truncating.file.withLock(revive) }
        let node = try metadata.refreshedNode(ino)
        guard let meta = node.file else {
            if changes.size != nil { throw .isDirectory }
            return attributes(of: node)   // folders have no times on Dropbox: accepted, not kept
        }
        try requireWritableContent(node, changes.size != nil ? "truncate" : "set the time of")
        guard let path = metadata.path(of: ino) else { throw .noEntry }
        let file = handle?.file ?? localFiles.file(ino)
        if let size = changes.size {
            try file.withLock { () throws(Errno) in
                var current = path
                let staging = try prepareWrite(file, path: &current, keepBytes: size, openedAt: handle?.remoteView,
                                               readLocal: handle?.localView.withLock { $0 }, revive: revive)
                try staging.truncate(to: size)
                handle?.localView.withLock { $0 = staging }
                if let prefix = file.sequentialPrefix, size < prefix {
                    file.breakSequence()
                    writeBack.noteRewrite(path: current, staging: staging)
                }
                if let mtime = changes.mtime { file.mtime = mtime } else { file.mtime = nil }
                metadata.setLocal(ino, size: size, modified: changes.mtime ?? Date())   // under the lock: see writeLocal
            }
            if let handle {
                handle.noteWrite()
            } else {
                try journalFile(file)
            }
        } else if let mtime = changes.mtime {
            let pending = node.local == .dirty || writeBack.stagingFile(path: path) != nil
            let unchanged = abs(meta.modified.timeIntervalSince(mtime)) < 1
            if pending || (!unchanged && meta.size <= Self.retimeMaxBytes) {
                // client_modified travels with a commit: journal (again) with the new time.
                try file.withLock { () throws(Errno) in
                    file.mtime = mtime
                    var current = path
                    if !file.writing { _ = try prepareWrite(file, path: &current, keepBytes: nil) }
                    metadata.setLocal(ino, size: (try? file.staging?.size()) ?? meta.size, modified: mtime)   // see writeLocal
                }
                if file.withLock({ file.writers == 0 }) || handle == nil { try journalFile(file) }
            } else if !unchanged {
                logger.info("\(path): a new modification time for an uploaded file over \(Self.retimeMaxBytes >> 20) MiB is not kept")
            }
        }
        return attributes(of: try metadata.refreshedNode(ino))
    }

    // MARK: Namespace

    public func create(parent: InodeNumber, name: String, flags: OpenFlags) throws(Errno) -> (EntryReply, OpenReply) {
        let writeBack = try requireWriteBack()
        try checkName(name, in: parent)
        if let existing = try metadata.child(of: parent, named: name) {
            if flags.contains(.exclusive) { throw .exists }
            // Another file whose name differs only in case: one name cannot hold two files.
            if existing.name != name { throw refuseCaseClash(name, existing.name, in: parent) }
            if existing.isDirectory { throw .isDirectory }
            let reply = try open(existing.ino, flags: flags.union(.write))
            metadata.addLookup(existing.ino)
            return (entryReply(metadata.node(existing.ino) ?? existing), reply)
        }
        guard let parentPath = metadata.path(of: parent) else { throw .noEntry }
        let path = parentPath + "/" + name
        try requireWritableFolder(parent, "create \(name) in")
        let node = try metadata.insertLocalFile(parent: parent, name: name, modified: Date())
        let file = localFiles.file(node.ino)
        do throws(Errno) {
            try file.withLock { () throws(Errno) in
                var path = path
                var began: (pending: StagingFile?, staging: StagingFile)?
                for attempt in 0..<3 where began == nil {
                    do throws(Errno) {
                        // Bytes still pending for this path from an earlier run (not shown yet)
                        // are the file's content: O_CREAT alone keeps them, O_TRUNC drops them.
                        let pending = writeBack.stagingFile(path: path)
                        began = (pending, try writeBack.beginWrite(path: path, base: .newFile) { self.metadata.path(of: node.ino) == path })
                    } catch .again where attempt < 2 {
                        // A rename of the folder (or onto this name) is under way: see prepareWrite.
                        file.waitUnlocked { writeBack.waitUntilNotHeld(path: path) }
                        guard let current = metadata.path(of: node.ino) else { throw .noEntry }
                        path = current
                    }
                }
                guard let (pending, staging) = began else { throw .again }
                if pending == nil || flags.contains(.truncate) { try staging.truncate(to: 0) }
                let size = try staging.size()
                if size > 0 { metadata.setLocal(node.ino, size: size) }
                file.staging = staging
                file.writing = true
                file.restartSequence()
                file.writers += 1
            }
        } catch {
            metadata.remove(node.ino)
            localFiles.forget(node.ino)
            throw error
        }
        let handle = WriteHandle(ino: node.ino, file: file, mayWrite: true, append: flags.contains(.append), remoteView: nil)
        // Even a file closed without a write (touch) must be uploaded.
        handle.noteWrite()
        let id = nextHandle.add(1, ordering: .relaxed).oldValue
        localFiles.add(handle, as: id)
        let staging = config.passthroughWrites ? file.withLock { file.staging } : nil
        return (entryReply(metadata.node(node.ino) ?? node), kernelWritable(OpenReply(handle: id, keepCache: false), staging))
    }

    public func mkdir(parent: InodeNumber, name: String) throws(Errno) -> EntryReply {
        let writeBack = try requireWriteBack()
        try checkName(name, in: parent)
        if try metadata.child(of: parent, named: name) != nil { throw .exists }
        guard let parentPath = metadata.path(of: parent) else { throw .noEntry }
        try requireWritableFolder(parent, "mkdir \(name) in")
        let path = parentPath + "/" + name
        let change = metadata.beginLocalChange()
        var changed: [String] = []
        defer { metadata.endLocalChange(change, changed: changed) }
        var shown: Result<Node, Errno> = .failure(.noEntry)
        try writeBack.journalMkdir(path: path) { operations in
            metadata.addPendingOperations(operations, paths: [path])
            shown = Result { () throws(Errno) in try metadata.insertLocalFolder(parent: parent, name: name) }
            changed = [path]
        }
        return entryReply(try shown.get())
    }

    public func unlink(parent: InodeNumber, name: String) throws(Errno) {
        let writeBack = try requireWriteBack()
        guard let node = try metadata.child(of: parent, named: name) else { throw .noEntry }
        if node.isDirectory { throw .isDirectory }
        guard let path = metadata.path(of: node.ino) else { throw .noEntry }
        try requireRemovable(node, from: parent, "unlink")
        let change = metadata.beginLocalChange()
        var changed: [String] = []
        defer { metadata.endLocalChange(change, changed: changed) }
        // Marked before the engine forgets the file's bytes: a close or a release journaling
        // meanwhile (FUSE's release comes whenever the kernel sends it) must not queue them again
        // as a new upload, which would bring the file back on Dropbox.
        let file = localFiles.existing(node.ino)
        file?.withLock { file!.unlinked = true }
        do throws(Errno) {
            try writeBack.journalUnlink(path: path, rev: { metadata.node(node.ino)?.file?.rev }) { operations in
                metadata.addPendingOperations(operations, paths: [path])
                file?.withLock { file!.writing = false }
                dropBlocks(of: metadata.remove(node.ino))
                changed = [path]
            }
        } catch {
            // Still there: what a close skipped meanwhile is journaled now.
            file?.withLock { file!.unlinked = false }
            if let file, file.withLock({ file.writing }) { try? journalFile(file) }
            throw error
        }
        localFiles.dropIfIdle(node.ino)
    }

    public func rmdir(parent: InodeNumber, name: String) throws(Errno) {
        let writeBack = try requireWriteBack()
        guard let node = try metadata.child(of: parent, named: name) else { throw .noEntry }
        guard node.isDirectory else { throw .notDirectory }
        guard let path = metadata.path(of: node.ino) else { throw .noEntry }
        try requireRemovable(node, from: parent, "rmdir")
        // Empty in the tree (which the change feed keeps current; pending uploads count). Dropbox
        // deletes folders recursively, so the queue asks it again right before the delete, and
        // keeps the folder if anything is in it there (NamespaceDispatcher.swift).
        try metadata.ensureListed(node.ino)
        if metadata.childCount(node.ino) > 0 { throw .notEmpty }
        let change = metadata.beginLocalChange()
        var changed: [String] = []
        defer { metadata.endLocalChange(change, changed: changed) }
        try writeBack.journalRmdir(path: path) { operations in
            metadata.addPendingOperations(operations, paths: [path])
            metadata.remove(node.ino)
            changed = [path]
        }
    }

    public func rename(parent: InodeNumber, name: String, newParent: InodeNumber, newName: String, flags: RenameFlags) throws(Errno) {
        let writeBack = try requireWriteBack()
        // Dropbox has no atomic exchange of two names.
        if flags.contains(.exchange) { throw .invalid }
        try checkName(newName, in: newParent)
        guard let source = try metadata.child(of: parent, named: name) else { throw .noEntry }
        try requireRemovable(source, from: parent, "rename")
        try requireWritableFolder(newParent, "rename \(name) into")
        var target = try metadata.child(of: newParent, named: newName)
        if target?.ino == source.ino { target = nil }   // a case-only rename
        if let target {
            if flags.contains(.noReplace) { throw .exists }
            // Onto another item whose name differs only in case (rsync's temporary file renamed
            // onto `readme` next to `README`): Dropbox cannot hold both, and replacing would drop
            // one of two files without a word. Refused, as a create of that name is.
            if target.name != newName { throw refuseCaseClash(newName, target.name, in: newParent) }
            switch (source.isDirectory, target.isDirectory) {
            case (true, false): throw .notDirectory
            case (false, true): throw .isDirectory
            case (true, true):
                try metadata.ensureListed(target.ino)
                if metadata.childCount(target.ino) > 0 { throw .notEmpty }
            case (false, false): break
            }
        }
        guard let from = metadata.path(of: source.ino), let toParent = metadata.path(of: newParent) else { throw .noEntry }
        let to = toParent + "/" + newName
        if from == to { return }
        if source.isDirectory, (to.lowercased() + "/").hasPrefix(from.lowercased() + "/"), from.lowercased() != to.lowercased() {
            throw .invalid   // into itself
        }
        // Dropbox refuses to move more than this in one go (too_many_files): EXDEV now, so that
        // `mv` copies and removes, rather than a rename that returns and is undone later.
        if source.isDirectory, metadata.subtreeCount(source.ino) > config.maxMoveEntries {
            logger.warning("rename \(from) → \(to): more than \(config.maxMoveEntries) files and folders for one move on Dropbox (too_many_files); EXDEV, so it is copied and removed instead")
            throw .crossDevice
        }
        let change = metadata.beginLocalChange()
        var changed: [String] = []
        defer { metadata.endLocalChange(change, changed: changed) }
        if WriteBackEngine.isCaseOnlyRename(from: from, to: to) {
            try renameChangingCase(source, from: from, to: to, newParent: newParent, newName: newName)
            changed = [from, to]
            return
        }
        let replacing: ReplacedTarget? = target.map { $0.isDirectory ? .folder : .file }
        try writeBack.journalRename(from: from, to: to, folder: source.isDirectory, replacing: replacing,
                                    revs: { (metadata.node(source.ino)?.file?.rev, target.flatMap { metadata.node($0.ino)?.file?.rev }) }) { operations in
            metadata.addPendingOperations(operations, paths: [from, to])
            dropBlocks(of: metadata.move(source.ino, to: newParent, name: newName, entry: nil))
            changed = [from, to]
            if let target, let replaced = localFiles.existing(target.ino) {
                replaced.withLock { replaced.unlinked = true; replaced.writing = false }
            }
        }
    }

    /// A case-only rename goes to Dropbox at once, through a temporary name
    /// (CaseOnlyRename.swift), once the queued operations on its path are done.
    private func renameChangingCase(_ source: Node, from: String, to: String, newParent: InodeNumber, newName: String) throws(Errno) {
        let writeBack = try requireWriteBack()
        var moved: RemoteEntry?
        try writeBack.rename(from: from, to: to) { () throws(Errno) -> [String: WriteBase] in
            guard writeBack.waitForNamespaceOperations(touching: [from], until: Date().addingTimeInterval(Self.caseRenameWait)) else {
                logger.warning("rename \(from) → \(to): earlier changes there are not on Dropbox yet (offline?); try again later")
                throw .again
            }
            writeBack.deliverPendingEvents()
            do throws(RemoteError) {
                metadata.expectCaseRename(of: from)
                let entry = try writeBack.renameChangingCase(from: from, to: to, using: remote)
                moved = entry
                if let rev = entry.rev { return [to: .revision(rev)] }
                return [:]
            } catch {
                // A file not uploaded yet only exists here: the engine moves its bytes.
                if case .notFound = error, !source.isDirectory { return [:] }
                logger.warning("rename \(from) → \(to): \(error.description(about: from))\(needsDropbox(error, "changing only the case of a name"))")
                if case .conflict = error { throw .exists }
                throw Errno(namespaceChange: error)
            }
        }
        dropBlocks(of: metadata.move(source.ino, to: newParent, name: newName, entry: moved))
    }

    /// How long a case-only rename waits for the queued operations on its path.
    static let caseRenameWait: TimeInterval = 30

    /// Drops the cached blocks of revs the tree no longer shows (our own commits, conflicts,
    /// unlinks and renames over a file), from memory and disk: nothing would ever read them again,
    /// and a file rewritten 20,000 times (fsx) left 294 MiB of them in the disk cache.
    private func dropBlocks(of stale: [StaleRevision]) {
        for revision in stale { blocks.purge(fileID: revision.fileID, rev: revision.rev) }
    }

    /// The end of the log line of a case-only rename refused while Dropbox cannot be reached: the
    /// one namespace change that is not journaled (docs/SEMANTICS.md, "Writing").
    private func needsDropbox(_ error: RemoteError, _ what: String) -> String {
        guard case .unavailable = error else { return "" }
        return "; \(what) needs Dropbox, so it fails until Dropbox answers (Network is unreachable); "
            + "other changes made meanwhile are kept and sent then"
    }

    /// EEXIST for `name` where `existing` differs from it only in case (Swift's `==` already
    /// treats composed and decomposed spellings as one name), with a log line.
    private func refuseCaseClash(_ name: String, _ existing: String, in parent: InodeNumber) -> Errno {
        let folder = metadata.path(of: parent).map { $0.isEmpty ? "/" : $0 } ?? "its folder"
        logger.info("refused \(name) in \(folder) (File exists): \(existing) is there, and Dropbox cannot hold two names that differ only in case")
        return .exists
    }

    private func checkName(_ name: String, in parent: InodeNumber) throws(Errno) {
        do throws(Errno) { try NameRules.check(name) } catch {
            let why = NameRules.refusal(name).map { ": \($0)" } ?? ""
            logger.warning("refused the name \"\(name)\" (\(error)): Dropbox does not accept it\(why)")
            throw error
        }
    }

    // MARK: After a restart

    /// Makes the uploads resumed from the journal (a crash, or an unmount past the drain bound)
    /// visible: each pending file shows its local size and bytes, also when Dropbox has never
    /// seen it. Call once the tree is loaded; lists the folders on the way (network).
    public func showPendingUploads() {
        guard let writeBack else { return }
        for upload in writeBack.status().uploads {
            var components = upload.path.split(separator: "/").map(String.init)
            guard let name = components.popLast() else { continue }
            var parent = rootInode
            for folder in components {
                guard let child = try? metadata.child(of: parent, named: folder), child.isDirectory else { parent = 0; break }
                parent = child.ino
            }
            guard parent != 0, let staging = writeBack.stagingFile(path: upload.path) else { continue }
            let size = (try? staging.size()) ?? upload.size
            let ino: InodeNumber
            if let existing = try? metadata.child(of: parent, named: name) {
                guard !existing.isDirectory else { continue }
                ino = existing.ino
            } else {
                guard let node = try? metadata.insertLocalFile(parent: parent, name: name, modified: Date()) else { continue }
                metadata.forget(node.ino, count: 1)   // no kernel reference yet
                ino = node.ino
            }
            metadata.setLocal(ino, size: size)
            // Committed while we looked: show the server's entry instead of a stale local one.
            if writeBack.stagingFile(path: upload.path) == nil, let entry = try? remote.metadata(path: upload.path) {
                metadata.applyCommitted(path: upload.path, entry: entry, stillDirty: false)
            }
            logger.info("pending upload shown on the mount: \(upload.path) (\(size) bytes)")
        }
    }

    /// Shows the namespace operations the journal still holds (a crash, or an unmount before
    /// they reached Dropbox) on the tree, as if just made, registers their paths as pending, and
    /// lets the engine send them. Call once the saved tree is loaded and before the mount serves
    /// (and before the changes since the last mount are applied, which must skip those paths).
    public func showQueuedNamespaceOperations() {
        guard let writeBack else { return }
        for operation in writeBack.queuedNamespaceOperations() {
            metadata.addPendingOperations([operation.sequence], paths: [operation.path] + (operation.target.map { [$0] } ?? []))
            metadata.applyQueued(operation)
            logger.info("not on Dropbox yet, shown on the mount: \(operation.kind.rawValue) \(operation.path)\(operation.target.map { " → \($0)" } ?? "")")
        }
        writeBack.releaseRecoveredNamespaceOperations()
    }

    /// A queued namespace operation is settled on Dropbox: its paths are no longer pending, and
    /// those whose state on Dropbox is not what it made are fetched again (in the background:
    /// events must not wait on the network).
    private func namespaceSettled(_ sequence: UInt64, refresh: [String]) {
        metadata.settlePendingOperation(sequence)
        refreshInBackground(refresh)
    }

    /// Shows what Dropbox has at `paths` (fetched on the `refreshes` queue) and tells the kernel
    /// what that changed.
    ///
    /// A path Dropbox did not answer for is fetched again after `retryDelay`, doubled each time
    /// up to a minute, until it answers: the change feed has already moved past what the tree
    /// should show there (it reported it while our own change was pending), so nothing else
    /// would correct the path before it changed again or the mount was remounted. Only the
    /// first failure is a warning in the log.
    func refreshInBackground(_ paths: [String], retryDelay: Double = 1) {
        guard !paths.isEmpty else { return }
        refreshes.async { [metadata, weak self] in
            let (invalidations, unanswered) = metadata.refreshFromDropbox(paths, failureLevel: retryDelay > 1 ? .debug : .warning)
            guard let self else { return }
            if !invalidations.isEmpty { kernelSink?.invalidate(invalidations) }
            refreshAgain(unanswered, after: retryDelay)
        }
    }

    /// Fetches `paths`, which Dropbox did not answer for, again after `delay` (and, while it
    /// still does not answer, after twice as long each time, up to `refreshRetryLimit`).
    func refreshAgain(_ paths: [String], after delay: Double) {
        guard !paths.isEmpty else { return }
        refreshes.asyncAfter(deadline: .now() + delay) { [weak self] in
            self?.refreshInBackground(paths, retryDelay: min(delay * 2, Self.refreshRetryLimit))
        }
    }

    /// The longest wait between two fetches of a path Dropbox did not answer for.
    static let refreshRetryLimit: Double = 60

    /// Tells the kernel `invalidations` from the refresh queue, never from the caller's thread.
    private func tellKernelInBackground(_ invalidations: [KernelInvalidation]) {
        guard !invalidations.isEmpty else { return }
        refreshes.async { [weak self] in self?.kernelSink?.invalidate(invalidations) }
    }

    // MARK: Engine events

    /// The staging file the engine handed over at this commit (its bytes are exactly the new
    /// rev's) becomes the rev's copy in the disk cache, so reading back what was just written
    /// costs no download (docs/VFSCACHE.md, "Bytes the mount wrote"). Moved (one rename, here on
    /// the event queue) when no local file of the inode is left, so nothing can write to it any
    /// more: a file's later writes go to a new staging file, and only a handle open on a file
    /// unlinked afterwards writes to the one it had. Otherwise copied in the background and
    /// checked against the rev's content hash. Runs after the tree shows the rev: a read in
    /// between downloads, as before.
    private func adoptCommittedBytes(generation: UInt64, entry: RemoteEntry, ino: InodeNumber?) {
        guard let writeBack, writeBack.configuration.handOverCommittedBytes else { return }
        // Not handed over (newer bytes were waiting): nothing there, and adopting finds nothing.
        let bytes = writeBack.stagingArea.committedBytes(generation: generation)
        guard !entry.id.isEmpty, let rev = entry.rev, !rev.isEmpty else {
            Glibc.unlink(bytes.path)
            return
        }
        let unshared = ino.map { localFiles.existing($0) == nil } ?? false
        blocks.adoptCommittedFile(fileID: entry.id, rev: rev, size: entry.size, contentHash: entry.contentHash,
                                  from: bytes, move: unshared)
    }

    func handleWriteBackEvent(_ event: WriteBackEvent) {
        switch event {
        case .committed(let path, let generation, let entry):
            // Recorded before the tree changes, so a feed batch fetched before the commit can
            // neither see the node still dirty nor undo the commit once it shows.
            metadata.recordLocalChange([path])
            let ino = metadata.locked { $0.resolve(path: path) }
            // Decided and applied under the file's lock: a write or truncate that began a new period
            // of changes between the two would otherwise see the tree show the commit over its bytes
            // (fsx: "Size error" after an fsync and a truncate; `aTruncateRightAfterACommitKeepsItsSize`).
            // A file object made here for the lock is dropped below when idle. Lock order: the
            // file's lock, then the engine's (keepsLocalBytes), then the tree's.
            let madeHere = ino.map { localFiles.existing($0) == nil } ?? false
            let file = ino.map { localFiles.file($0) }
            let decideAndApply = { () -> (stillDirty: Bool, stale: [StaleRevision]) in
                let stillDirty = file?.writing == true || self.writeBack?.keepsLocalBytes(path: path, showing: generation) == true
                return (stillDirty, self.metadata.applyCommitted(path: path, entry: entry, stillDirty: stillDirty))
            }
            let (stillDirty, stale) = file.map { $0.withLock(decideAndApply) } ?? decideAndApply()
            dropBlocks(of: stale)
            if let ino, stillDirty, madeHere { localFiles.dropIfIdle(ino) }
            if !stillDirty, let ino {
                // Forget the kernel's view of the old rev, and the local file once idle.
                metadata.clearOpenedRev(ino)
                localFiles.dropIfIdle(ino)
            }
            // Only now, with the tree showing the new rev, may the engine let the staging file go
            // (an open for writing before this found it still there; StagingRetention.swift).
            writeBack?.commitShown(path: path, generation: generation)
            adoptCommittedBytes(generation: generation, entry: entry, ino: ino)
        case .conflicted(let path, let copyPath, let generation, let entry):
            logger.warning("conflict: \(path) was changed elsewhere; ours is kept as \(copyPath)")
            let ino = metadata.locked { $0.resolve(path: path) }
            let file = ino.flatMap { localFiles.existing($0) }
            if let file {
                // The path shows the other version now: a later write starts from that one.
                file.withLock {
                    if !file.writing { file.staging = nil }
                    file.kernelPagesStale = true
                }
            }
            // The other version, as the server has it now (unknown if the call fails: fetched
            // again below, since the feed reported it while our bytes were pending and a watched
            // tree is not refreshed by age: `aConflictWhoseOtherVersionCouldNotBeFetchedIsFetchedAgainUntilDropboxAnswers`).
            var remoteVersion: RemoteEntry??
            do throws(RemoteError) { remoteVersion = .some(try remote.metadata(path: path)) } catch {
                remoteVersion = nil
            }
            if case .some(.some(let theirs)) = remoteVersion {
                logger.debug("conflict: \(path) shows rev \(theirs.rev ?? "-") (\(theirs.size) bytes) now")
            }
            metadata.recordLocalChange([path, copyPath])
            // Newer bytes of ours (a writer that began before this event, or a later close) stay
            // the path's until their own commit settles them, as for a commit: shown over them,
            // another client's delete took the node from under an open writer, whose next write
            // failed with ENOENT (`aConflictShownWhileALaterWriteIsOpenLeavesThatWriteStanding`).
            // Decided and applied under the file's lock; lock order as for `.committed`.
            let decideAndApply = { () -> (stale: [StaleRevision], invalidations: [KernelInvalidation]) in
                let newerBytes = file?.writing == true || self.writeBack?.keepsLocalBytes(path: path, showing: generation) == true
                return self.metadata.applyConflict(path: path, remoteVersion: remoteVersion, stillDirty: newerBytes, copy: entry,
                                                   copyPath: copyPath)
            }
            let applied = file.map { $0.withLock(decideAndApply) } ?? decideAndApply()
            dropBlocks(of: applied.stale)
            // Told from the refresh queue: this handler may run while a FUSE request waits for the
            // engine's events (deliverPendingEvents), and the kernel's invalidation may wait for it.
            tellKernelInBackground(applied.invalidations)
            if remoteVersion == nil { refreshInBackground([path]) }
            // Writers that opened in between waited for this (prepareWrite): theirs is shown now.
            writeBack?.conflictShown(path: path, generation: generation)
        case .failed:
            break   // the engine logs it; flush, fsync and sync report it
        case .namespaceSettled(let sequence, let refresh, _):
            namespaceSettled(sequence, refresh: refresh)
        }
    }
}
