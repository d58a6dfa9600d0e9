/// `VFS`: the filesystem the FUSE glue calls (`FilesystemOperations`), assembled from the
/// metadata cache (names, attributes, inode lookup counts), the block store (data), the handle
/// tables and the space-usage cache. The write operations live in VFS+Write.swift: they stage
/// bytes locally and hand them to the `WriteBackEngine` (nil `writeBack`: a read-only mount, where
/// every write operation throws EROFS).
///
/// Lock order (a lock may only be taken while holding locks above it; none is held across a
/// remote call or disk I/O):
///   1. `VFS.handles` (handle tables)      4. `SingleFlight`, `BlockFlights` locks (flight maps, then one flight)
///   2. `OpenFile.lock` (one handle)       5. `MemoryBlockCache.lock`, `DiskBlockCache.lock`
///   3. `MetadataCache.lock` (the tree)    6. `WorkerPool` conditions, `SpaceUsageCache.lock`
/// In practice each is taken alone: the code copies what it needs out and releases the lock
/// before calling into another component.
import ContentHash
import Foundation
import Synchronization

public final class VFS: FilesystemOperations, Sendable {
    public let config: VFSConfig
    public let logger: Logger
    let metadata: MetadataCache
    let blocks: BlockStore
    private let spaceUsage: SpaceUsageCache
    private let handles = Mutex(HandleTables())
    let nextHandle = Atomic<UInt64>(1)
    let remote: any RemoteStore
    /// The write side (VFS+Write.swift): nil on a read-only mount.
    public let writeBack: WriteBackEngine?
    /// Files written through the mount and their write handles.
    let localFiles = LocalFiles()
    /// The exports of files Dropbox cannot download (ExportedFiles.swift).
    let exported: ExportedFiles
    /// Fetches of paths whose queued operation did not go as planned (VFS+Write.swift), off the
    /// engine's event queue.
    let refreshes = DispatchQueue(label: "dbxfs.namespace-refresh")
    /// Where those fetches tell the kernel what changed (the mount's notifier, once it serves).
    private let refreshSink = Mutex<(any CacheInvalidationSink)?>(nil)
    /// The `user.dropbox.shared_link` attribute's answers (SharedLinks.swift).
    let sharedLinks: SharedLinks

    /// Told after the change feed changed the tree (PinnedFiles fetches new revisions of pinned
    /// files), on the feed's thread: an observer only takes note and returns.
    private let treeObservers = Mutex<[@Sendable () -> Void]>([])

    /// An open directory: the listing snapshot readdir pages through by offset.
    private struct DirectorySnapshot: Sendable {
        var ino: InodeNumber
        var entries: [(name: String, ino: InodeNumber)]
        /// Taken by opendir and not read from offset 0 yet. A later read from offset 0 (rewinddir
        /// on a held-open directory) takes a new snapshot, so it sees remote changes.
        var unread = true
    }

    private struct HandleTables: ~Copyable {
        var files: [HandleID: OpenFile] = [:]
        var directories: [HandleID: DirectorySnapshot] = [:]
        /// Opens of export-only files: the export's bytes, read from memory.
        var exports: [HandleID: (ino: InodeNumber, data: [UInt8])] = [:]
    }

    /// Why a VFS could not be built (today: the disk cache directory is unusable).
    public struct SetupError: Error, CustomStringConvertible {
        public var description: String
    }

    /// - Parameters:
    ///   - remote: Dropbox (or a fake), with the mount's `--root` already applied.
    ///   - config: tunables; `config.cacheDirectory` nil means no disk cache.
    ///   - logger: where warnings (failed reads, stale listings) go.
    ///   - clock: TTL time source (tests inject a manual one).
    ///   - writeBack: the write-back engine's settings; nil for a read-only mount. Needs
    ///     `config.cacheDirectory` (the journal and staging files live there).
    ///   - uploadRemote: what the write-back engine uploads through (default `remote`). The mount
    ///     gives the facade a remote whose calls wait a bounded time (a FUSE caller is waiting)
    ///     and the engine one that keeps retrying (nobody waits on an upload).
    public init(remote: any RemoteStore, config: VFSConfig, logger: Logger = Logger(), clock: TimeSource = .monotonic,
                writeBack writeBackConfiguration: WriteBackConfiguration? = nil,
                uploadRemote: (any RemoteStore)? = nil) throws(SetupError) {
        precondition(config.blockSize > 0, "blockSize must be positive")
        self.config = config
        self.logger = logger
        self.remote = remote
        // Commit events arrive on the engine's queue; the relay forwards them once `self` exists.
        let relay = WriteEventRelay()
        if let writeBackConfiguration {
            guard let directory = config.cacheDirectory else {
                throw SetupError(description: "writing needs a cache directory")
            }
            var engineConfiguration = writeBackConfiguration
            if engineConfiguration.logger == nil { engineConfiguration.logger = logger }
            // What the mount wrote is kept in the disk cache once committed (adoptCommittedBytes).
            engineConfiguration.handOverCommittedBytes = config.diskCacheBytes > 0
            do throws(Errno) {
                writeBack = try WriteBackEngine(cacheDirectory: directory, remote: uploadRemote ?? remote,
                                                configuration: engineConfiguration,
                                                onEvent: { relay.deliver($0) })
            } catch {
                throw SetupError(description: "cannot open the upload journal in \(directory.path): \(error)")
            }
        } else {
            writeBack = nil
        }
        var disk: DiskBlockCache?
        if let directory = config.cacheDirectory, config.diskCacheBytes > 0 {
            do {
                disk = try DiskBlockCache(directory: directory, blockSize: config.blockSize, budget: config.diskCacheBytes, log: logger,
                                          observer: config.observer)
            } catch {
                throw SetupError(description: "cannot use cache directory \(directory.path): \(error.localizedDescription)")
            }
        }
        metadata = MetadataCache(remote: remote, config: config, clock: clock, log: logger)
        blocks = BlockStore(remote: remote, config: config, disk: disk, log: logger)
        spaceUsage = SpaceUsageCache(remote: remote, ttl: config.statfsTTL, clock: clock, log: logger)
        exported = ExportedFiles(remote: remote, log: logger)
        sharedLinks = SharedLinks(remote: remote, clock: clock)
        relay.connect { [weak self] event in self?.handleWriteBackEvent(event) }
    }

    deinit { blocks.shutdown() }

    /// Stops the background threads after they finish queued work (read-ahead, disk writes).
    public func shutdown() {
        blocks.waitUntilIdle()
        blocks.shutdown()
    }

    /// Adds an observer of the change feed's changes to the tree.
    public func observeTreeChanges(_ observer: @escaping @Sendable () -> Void) {
        treeObservers.withLock { $0.append(observer) }
    }

    func noteTreeChanged() {
        for observer in treeObservers.withLock({ $0 }) { observer() }
    }

    /// Cache use against budgets, for `dbxfs status`.
    public func cacheUsage() -> CacheUsage {
        let memory = blocks.memory.usage
        let disk = blocks.disk?.usage ?? (bytes: 0, blocks: 0)
        let open = handles.withLock { ($0.files.count + $0.exports.count + localFiles.handleCount, $0.directories.count) }
        return CacheUsage(memoryBytes: memory.bytes, memoryBudget: config.memoryCacheBytes, memoryBlocks: memory.blocks,
                          diskBytes: disk.bytes, diskBudget: blocks.disk == nil ? 0 : config.diskCacheBytes, diskBlocks: disk.blocks,
                          nodes: metadata.nodeCount, openFiles: open.0, openDirectories: open.1)
    }

    /// From now on, what a fetch after an operation that did not go as planned changes is told
    /// to the kernel through `sink` (called on a queue of its own, never in a FUSE request).
    public func tellKernel(through sink: any CacheInvalidationSink) {
        refreshSink.withLock { $0 = sink }
    }

    /// The sink `tellKernel` connected.
    var kernelSink: (any CacheInvalidationSink)? { refreshSink.withLock { $0 } }

    /// Waits for read-ahead and disk-cache writes in flight, and for refreshes of paths after
    /// namespace operations (tests).
    func waitUntilIdle() {
        blocks.waitUntilIdle()
        writeBack?.deliverPendingEvents()
        refreshes.sync {}
    }

    // MARK: Attributes

    func attributes(of node: Node) -> FileAttributes {
        // Dropbox refuses writes to it (a read-only shared folder, an export-only file): no
        // write bits, so tools see it before they try (docs/SEMANTICS.md).
        let writable: UInt16 = node.isReadOnly ? ~0o222 : 0o7777
        // A node no longer in the tree (unlinked, replaced by a rename, deleted on Dropbox) that
        // an open descriptor still reaches has no links, as on ext4 (pjdfstest unlink/14.t).
        let links: UInt32 = node.isAttached ? 1 : 0
        switch node.kind {
        case .directory:
            // nlink 1: "unknown", so tools like find don't infer subfolder counts from it.
            return FileAttributes(ino: node.ino, kind: .directory, size: 0, mtime: config.mountTime,
                                  permissions: config.directoryPermissions & writable, nlink: links, uid: config.uid, gid: config.gid)
        case .file(let file):
            var size = node.isExportOnly ? exportSize(of: node, file) : file.size
            var modified = file.modified
            // Written by the kernel itself (passthrough writes): what its staging file says now.
            if let stamp = localFiles.existing(node.ino)?.kernelWrittenStamp() {
                size = stamp.size
                modified = stamp.modifiedDate
            }
            return FileAttributes(ino: node.ino, kind: .file, size: size, mtime: modified,
                                  permissions: config.filePermissions & writable, nlink: links, uid: config.uid, gid: config.gid)
        }
    }

    /// An export-only file's size is its export's, never the listed one: exported on its first
    /// stat (once per revision). If that fails, 0, and a warning (a read then fails with EIO).
    private func exportSize(of node: Node, _ file: Node.FileMetadata) -> UInt64 {
        guard let id = node.id else { return 0 }
        return (try? exported.size(id: id, rev: file.rev, path: node.name)) ?? 0
    }

    func entryReply(_ node: Node) -> EntryReply {
        EntryReply(attributes: attributes(of: node), entryTimeout: config.entryTimeout, attributeTimeout: config.attributeTimeout)
    }

    // MARK: Names

    public func lookup(parent: InodeNumber, name: String) throws(Errno) -> EntryReply {
        entryReply(try metadata.lookup(parent: parent, name: name))
    }

    public func displayName(of ino: InodeNumber) -> String? {
        guard ino != rootInode, let node = metadata.node(ino), node.isAttached else { return nil }
        return node.name
    }

    public func forget(_ ino: InodeNumber, count: UInt64) {
        metadata.forget(ino, count: count)
    }

    public func getattr(_ ino: InodeNumber) throws(Errno) -> (FileAttributes, timeout: Double) {
        (attributes(of: try metadata.refreshedNode(ino)), config.attributeTimeout)
    }

    public func setattr(_ ino: InodeNumber, changes: AttributeChanges, handle: HandleID?) throws(Errno) -> FileAttributes {
        // Truncate and utimens go through the write side; chmod/chown are accepted and ignored
        // (Dropbox keeps no modes), so `cp -a` works on a read-only view too.
        guard changes.size == nil, changes.mtime == nil else { return try setLocalAttributes(ino, changes: changes, handle: handle) }
        return attributes(of: try metadata.refreshedNode(ino))
    }

    // MARK: Directories

    public func openDirectory(_ ino: InodeNumber) throws(Errno) -> HandleID {
        let entries = try Self.staleIfGone { () throws(Errno) in try metadata.snapshot(of: ino) }
        let handle = nextHandle.add(1, ordering: .relaxed).oldValue
        handles.withLock { $0.directories[handle] = DirectorySnapshot(ino: ino, entries: entries) }
        return handle
    }

    /// Offsets: 0 is the start; "." is entry 0, ".." entry 1, child i entry i + 2; each entry's
    /// `nextOffset` is its position + 1. Each call is O(limit), whatever the offset.
    public func readDirectory(_ ino: InodeNumber, handle: HandleID, offset: Int, limit: Int) throws(Errno) -> [DirectoryEntry] {
        if offset == 0, handles.withLock({ tables in
            defer { tables.directories[handle]?.unread = false }
            return tables.directories[handle]?.unread == false
        }), let fresh = try? metadata.snapshot(of: ino) {
            handles.withLock { tables in
                if tables.directories[handle]?.ino == ino { tables.directories[handle]?.entries = fresh }
            }
        }
        let page: (children: ArraySlice<(name: String, ino: InodeNumber)>, dots: [Int])? = handles.withLock { tables in
            guard let snapshot = tables.directories[handle], snapshot.ino == ino else { return nil }
            let start = max(offset, 0)
            let dots = start < 2 ? Array(start..<min(2, start + max(limit, 0))) : []
            let first = min(max(start - 2, 0), snapshot.entries.count)
            let count = max(0, min(limit - dots.count, snapshot.entries.count - first))
            return (snapshot.entries[first..<(first + count)], dots)
        }
        guard let page else { throw .badFile }
        var result: [DirectoryEntry] = []
        result.reserveCapacity(page.dots.count + page.children.count)
        if !page.dots.isEmpty {
            guard let node = metadata.node(ino) else { throw .noEntry }
            let parent = (node.parent != 0 ? metadata.node(node.parent) : nil) ?? node
            for position in page.dots {
                let target = position == 0 ? node : parent
                result.append(DirectoryEntry(name: position == 0 ? "." : "..", attributes: attributes(of: target), nextOffset: position + 1))
            }
        }
        let nodes = metadata.nodes(page.children.lazy.map(\.ino))
        for (position, (child, node)) in zip(page.children.indices, zip(page.children, nodes)) {
            // A child removed since opendir is skipped; its offset stays valid for the others.
            guard let node else { continue }
            result.append(DirectoryEntry(name: child.name, attributes: attributes(of: node), nextOffset: position + 3))
        }
        return result
    }

    public func releaseDirectory(_ ino: InodeNumber, handle: HandleID) {
        _ = handles.withLock { $0.directories.removeValue(forKey: handle) }
    }

    // MARK: Files

    /// An open names an inode the kernel looked up earlier, so "no entry" means the inode is gone
    /// (deleted elsewhere since): ESTALE, which makes the kernel look the name up again and retry
    /// once, as a local disk would have answered for the name now (`open(O_CREAT)` creates, a
    /// file recreated elsewhere opens). ENOENT failed an `O_CREAT` open.
    private static func staleIfGone<T>(_ body: () throws(Errno) -> T) throws(Errno) -> T {
        do throws(Errno) { return try body() } catch .noEntry { throw .stale }
    }

    public func open(_ ino: InodeNumber, flags: OpenFlags) throws(Errno) -> OpenReply {
        try Self.staleIfGone { () throws(Errno) in try openInode(ino, flags: flags) }
    }

    private func openInode(_ ino: InodeNumber, flags: OpenFlags) throws(Errno) -> OpenReply {
        // A read of the server's bytes follows the mount's own later writes (OpenFile.localBytes).
        // Attached before the write side looks, so a write that begins after it decided "clean"
        // is followed too; detached again if this open does not become such a reader.
        let reader = writeBack != nil && flags.isDisjoint(with: [.write, .truncate, .append]) ? localFiles.attachReader(ino) : nil
        var readerKept = false
        defer { if !readerKept, let reader { localFiles.detachReader(reader.file) } }
        // Opens for writing, and reads of files with local bytes, are the write side's.
        if let reply = try openLocal(ino, flags: flags) { return reply }
        let node = try metadata.refreshedNode(ino)
        guard let file = node.file else { throw .isDirectory }
        guard let path = metadata.path(of: ino), let fileID = node.id else { throw .noEntry }
        if node.isExportOnly {
            let data = try exported.content(id: fileID, rev: file.rev, path: path)
            let handle = nextHandle.add(1, ordering: .relaxed).oldValue
            handles.withLock { $0.exports[handle] = (ino, data) }
            return OpenReply(handle: handle, keepCache: metadata.noteOpened(ino, rev: file.rev))
        }
        // A writer of the mount's own is open: the pages are of its writes, maybe still on their
        // way, if the rev is the mount's own commit (`pagesFollowLocalWrites`).
        let ownPages = reader.map { pagesFollowLocalWrites($0.file) } == true && writeBack?.isOwnCommit(path: path, rev: file.rev) == true
        let keepCache = metadata.noteOpened(ino, rev: file.rev) || ownPages
        if !keepCache { kernelDropsPages(of: reader?.file) }
        let openFile = OpenFile(ino: ino, path: path, fileID: fileID, file: file, verify: config.verifyContentHash,
                                usesPieceDigests: blocks.usesPieceDigests, follows: reader.map { ($0.file, $0.periods) })
        readerKept = true
        let handle = nextHandle.add(1, ordering: .relaxed).oldValue
        handles.withLock { $0.files[handle] = openFile }
        let backing = config.keepWholeFiles ? blocks.disk?.wholeFile(fileID: fileID, rev: file.rev) : nil
        return OpenReply(handle: handle, keepCache: keepCache, backingFile: backing)
    }

    public func read(_ ino: InodeNumber, handle: HandleID, offset: UInt64, size: Int) throws(Errno) -> [UInt8] {
        try readPieces(ino, handle: handle, offset: offset, size: size) { pieces in
            // One copy, from the cached blocks into the reply.
            let count = pieces.reduce(0) { $0 + $1.count }
            return [UInt8](unsafeUninitializedCapacity: count) { buffer, initialized in
                var written = 0
                for piece in pieces {
                    UnsafeMutableRawBufferPointer(rebasing: UnsafeMutableRawBufferPointer(buffer)[written..<(written + piece.count)])
                        .copyMemory(from: piece)
                    written += piece.count
                }
                initialized = written
            }
        }
    }

    public func readPieces<R>(_ ino: InodeNumber, handle: HandleID, offset: UInt64, size: Int,
                              _ body: ([UnsafeRawBufferPointer]) -> R) throws(Errno) -> R {
        if let local = localFiles.handle(handle) { return try readLocal(local, ino: ino, offset: offset, size: size, body) }
        if let export = handles.withLock({ $0.exports[handle] }) {
            guard export.ino == ino else { throw .badFile }
            let start = Int(min(offset, UInt64(export.data.count)))
            let end = min(start + max(size, 0), export.data.count)
            return export.data.withUnsafeBytes { all in
                body(start < end ? [UnsafeRawBufferPointer(rebasing: all[start..<end])] : [])
            }
        }
        guard let file = handles.withLock({ $0.files[handle] }), file.ino == ino else { throw .badFile }
        if let staging = file.localBytes() {
            // Another descriptor of the mount changed the file since this one opened: its bytes.
            let bytes = try staging.read(at: offset, count: size)
            return bytes.withUnsafeBytes { body($0.isEmpty ? [] : [$0]) }
        }
        guard size > 0, offset < file.size else { return body([]) }
        let end = min(offset + UInt64(size), file.size)
        let blockSize = UInt64(config.blockSize)
        let firstBlock = offset / blockSize
        let lastBlock = (end - 1) / blockSize

        // Read-ahead first, so its downloads overlap with this read's own.
        let policy = ReadAhead.Policy(blockSize: config.blockSize, threshold: config.prefetchThreshold, maxWindow: config.readAheadMaxBytes,
                                      spanBytes: config.readAheadSpanBlocks * config.blockSize, fileSize: file.size)
        let observed = file.observe(offset: offset, length: Int(end - offset), policy: policy)
        if let expected = observed.seekFrom {
            logger.debug("read of \(file.path): seek to \(offset) (sequential would be \(expected)), read-ahead reset")
        }
        // Drop-behind: a streaming reader is done with the block two before this read (the
        // kernel's own read-ahead may still ask for the one just before). Its bytes are in the
        // kernel's page cache and on disk; keeping it would hold the memory cache full, and the
        // daemon's memory high, long after a big file was read through.
        if observed.streaming, firstBlock >= 2 {
            file.dropBehind(below: firstBlock - 1)
            blocks.memory.remove(file.blockRequest(firstBlock - 2, blockSize: config.blockSize).key)
        }
        if let ahead = observed.ahead, ahead.lowerBound < file.size {
            let from = max(ahead.lowerBound / blockSize, lastBlock + 1)
            let to = (min(ahead.upperBound, file.size) - 1) / blockSize
            if from <= to {
                blocks.prefetch((from...to).map { file.blockRequest($0, blockSize: config.blockSize) },
                                droppedByReader: { [file] in file.hasDropped($0) })
            }
        }

        // What to fetch for bytes not cached: whole blocks for a sequential reader (read-ahead and
        // the content-hash check work in blocks; a straggler behind the stream is one of its
        // reads), fragments around the read for a random one, more the longer it stays sequential.
        let wholeBlocks = observed.streaming || (observed.checking && (observed.seekFrom.map { offset < $0 } ?? true))
        let fetch: BlockStore.FetchSize = wholeBlocks ? .wholeBlock : .around(Int(min(observed.sequentialBytes, blockSize)), fileSize: file.size)
        var slices: [BlockStore.Slice] = []
        var wholeBlocksRead: [CachedBlock?] = []   // by block, from firstBlock; nil: read from fragments
        slices.reserveCapacity(Int(lastBlock - firstBlock + 1))
        for index in firstBlock...lastBlock {
            let blockStart = index * blockSize
            let within = Int(max(offset, blockStart) - blockStart)..<Int(min(end, blockStart + blockSize) - blockStart)
            let read = try blocks.read(file.blockRequest(index, blockSize: config.blockSize), within: within, fetch: fetch,
                                       droppedByReader: { [file] in file.hasDropped($0) })
            wholeBlocksRead.append(read.count == 1 && read[0].isWholeBlock ? read[0].block : nil)
            slices += read
        }
        // The requested bytes of each block or fragment (they stay alive in `slices`).
        var pieces: [UnsafeRawBufferPointer] = []
        pieces.reserveCapacity(slices.count)
        for slice in slices {
            guard slice.bytes.upperBound <= slice.block.filled else {
                logger.error("read of \(file.path): a block of rev \(file.rev) is short (\(slice.block.filled) bytes, \(file.size) expected in all)")
                throw .io
            }
            pieces.append(UnsafeRawBufferPointer(rebasing: slice.block.buffer[slice.bytes]))
        }

        // Where each 4 MiB content-hash piece's digest comes from: the whole block holding it.
        let pieceSource = { (piece: UInt64) -> PieceSource? in
            let start = piece * UInt64(DropboxContentHasher.blockSize)
            let index = start / blockSize
            guard index >= firstBlock, index <= lastBlock, let block = wholeBlocksRead[Int(index - firstBlock)] else { return nil }
            return PieceSource(block: block, slot: Int((start - index * blockSize) / UInt64(DropboxContentHasher.blockSize)))
        }
        switch file.verify(offset: offset, pieces, pieceSource: pieceSource) {
        case .matched:
            logger.debug("read of \(file.path) (rev \(file.rev)): content hash verified")
            if config.keepWholeFiles { blocks.keepWholeFile(fileID: file.fileID, rev: file.rev, size: file.size, path: file.path) }
        case .abandoned:
            logger.debug("read of \(file.path): not sequential, content hash not checked")
        case .mismatched(let actual):
            logger.error("read of \(file.path) (rev \(file.rev)): content hash mismatch (expected \(file.contentHash ?? "?"), got \(actual)); dropping its cached blocks")
            blocks.purge(fileID: file.fileID, rev: file.rev)
            metadata.clearOpenedRev(ino)
            throw .io
        case .pending, nil:
            break
        }
        return withExtendedLifetime(slices) { body(pieces) }
    }

    public func write(_ ino: InodeNumber, handle: HandleID, offset: UInt64, data: UnsafeRawBufferPointer) throws(Errno) -> Int {
        try writeLocal(ino, handle: handle, offset: offset, data: data)
    }

    public func flush(_ ino: InodeNumber, handle: HandleID) throws(Errno) {
        // Read-only handles have nothing to report; write handles journal and report earlier errors.
        try flushLocal(ino, handle: handle)
    }

    public func fsync(_ ino: InodeNumber, handle: HandleID?) throws(Errno) {
        try fsyncLocal(ino, handle: handle)
    }

    public func release(_ ino: InodeNumber, handle: HandleID) {
        if releaseLocal(ino, handle: handle) { return }
        let (closed, gone): (OpenFile?, String?) = handles.withLock { handles in
            handles.exports.removeValue(forKey: handle)
            guard let file = handles.files.removeValue(forKey: handle) else { return (nil, nil) }
            return (file, handles.files.values.contains { $0.fileID == file.fileID } ? nil : file.fileID)
        }
        if let follows = closed?.follows { localFiles.detachReader(follows.file) }
        // The file's last read handle: what was being fetched in the background for its random
        // readers stops.
        if let gone { blocks.readersGone(fileID: gone) }
    }

    /// A read-side handle for `ino` (used by the write side for reads before a first write).
    func makeReader(_ ino: InodeNumber, path: String, fileID: String, file: Node.FileMetadata) -> OpenFile {
        OpenFile(ino: ino, path: path, fileID: fileID, file: file, verify: false, usesPieceDigests: blocks.usesPieceDigests)
    }

    // Namespace changes (create, mkdir, unlink, rmdir, rename) are in VFS+Write.swift.

    // MARK: Filesystem-wide

    public func statfs() throws(Errno) -> FilesystemStats {
        var stats = try spaceUsage.stats()
        stats.usedFiles = UInt64(metadata.nodeCount)
        return stats
    }

    public func getxattr(_ ino: InodeNumber, name: String) throws(Errno) -> [UInt8] {
        guard let node = metadata.node(ino) else { throw .noEntry }
        if name == ExtendedAttributes.sharedLink { return try sharedLinkAttribute(of: node) }
        guard let value = ExtendedAttributes.value(name, of: node) else { throw .noData }
        return Array(value.utf8)
    }

    public func listxattr(_ ino: InodeNumber) throws(Errno) -> [String] {
        guard let node = metadata.node(ino) else { throw .noEntry }
        return ExtendedAttributes.names(of: node)
    }
}
