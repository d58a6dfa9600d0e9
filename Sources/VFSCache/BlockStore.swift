/// `BlockStore`: where a read gets its bytes. A block comes from memory, else from the disk
/// cache, else from one ranged download; concurrent requests for one block share a single fetch
/// (single-flight). Demand fetches run on the calling FUSE thread (no hand-off latency);
/// read-ahead fetches run on the store's bounded worker pool, in parallel, a span of several
/// blocks per download. Downloaded blocks are handed to a separate disk-writer thread, or dropped
/// when it is behind, so no reader waits for the disk cache.
import ContentHash
import Foundation
import Synchronization

final class BlockStore: @unchecked Sendable {
    // @unchecked: `pendingDiskBytes` is only touched with `diskQueue` locked; the rest is immutable
    // or Sendable.
    let memory: MemoryBlockCache
    let disk: DiskBlockCache?
    /// Fetches under way, keyed by block and purge epoch: a fetch that began before a purge of its
    /// file is never joined after it, and does not put what it read back into the caches.
    private struct FlightKey: Hashable, Sendable { var block: BlockKey; var epoch: Int }
    private let flights = SingleFlight<FlightKey, CachedBlock>()
    /// Purge epochs by file id, in 256 slots: each purge bumps its file's slot. Per file because
    /// purges are frequent (every commit of a file that had a rev replaces that rev): one must not
    /// make every other file's read-ahead throw away what it fetched.
    private let purgeEpochs = Mutex<[Int]>(Array(repeating: 0, count: 256))
    /// The cause of each block's last failed fetch, so every reader that shared the fetch can log it.
    private let failures = Mutex<[BlockKey: FetchFailure]>([:])
    /// Whether the content-hash check uses the blocks' 4 MiB piece digests (see `CachedBlock`).
    let usesPieceDigests: Bool
    private let readAheadPool: WorkerPool
    private let diskWriter: WorkerPool
    /// Writes whole-file copies (`keepWholeFile`), one at a time, apart from the block writer.
    private let wholeFileWriter: WorkerPool
    /// Bytes handed to `diskWriter` and not written yet (bounded by `diskWriteQueueBytes`),
    /// under `diskQueue`.
    private let diskQueue = NSCondition()
    private var pendingDiskBytes = 0
    private let droppedDiskWrites = Atomic<Int>(0)
    /// Whole-file copies being written (`keepWholeFile`).
    private let assembling = Mutex<Set<BlockKey>>([])
    private let remote: any RemoteStore
    private let config: VFSConfig
    private let log: Logger

    init(remote: any RemoteStore, config: VFSConfig, disk: DiskBlockCache?, log: Logger) {
        self.remote = remote
        self.config = config
        self.disk = disk
        self.log = log
        memory = MemoryBlockCache(budget: config.memoryCacheBytes)
        usesPieceDigests = config.verifyContentHash && config.blockSize % DropboxContentHasher.blockSize == 0
        readAheadPool = WorkerPool(name: "dbxfs-readahead", threads: config.readAheadParallelism)
        diskWriter = WorkerPool(name: "dbxfs-diskcache", threads: 2)
        wholeFileWriter = WorkerPool(name: "dbxfs-wholefile", threads: 1)
    }

    /// The block, waiting for a fetch already under way if there is one. Failures are EIO, with
    /// one error line naming the file, the range and the cause.
    func block(_ request: BlockRequest) throws(Errno) -> CachedBlock {
        if let block = memory.get(request.key) { return block }
        let deadline = Date(timeIntervalSinceNow: config.readTimeout)
        do throws(Errno) {
            while true {
                let epoch = self.epoch(of: request.key.fileID)
                do throws(Errno) {
                    return try flights.run(FlightKey(block: request.key, epoch: epoch), deadline: deadline) { () throws(Errno) in
                        try load(request, epoch: epoch)
                    }
                } catch where error == .again {
                    // We joined a read-ahead that gave this block up (`fetchSpan`): fetch it ourselves.
                    if let block = memory.get(request.key) { return block }
                }
            }
        } catch {
            let failure = failures.withLock { $0[request.key] }
            let cause = error == .timedOut ? "not fetched within \(config.readTimeout) s" : failure?.cause ?? "\(error)"
            log.error("read of \(request.path) (rev \(request.key.rev)) bytes \(request.range.lowerBound) to \(request.range.upperBound) failed: \(cause)")
            throw error == .timedOut ? .io : failure?.errno ?? .io
        }
    }

    /// Starts fetching the blocks of one file in the background, skipping those cached or already
    /// on their way. Consecutive blocks within one span (`VFSConfig.readAheadSpanBlocks` blocks,
    /// aligned) come in one ranged download, cut into blocks as the bytes arrive.
    /// `droppedByReader` says which blocks (by index) the streaming reader that asked has already
    /// read and dropped by the time the fetch runs: those are skipped.
    func prefetch(_ requests: [BlockRequest], droppedByReader: @escaping @Sendable (UInt64) -> Bool = { _ in false }) {
        guard let fileID = requests.first?.key.fileID else { return }
        let epoch = self.epoch(of: fileID)
        let wanted = requests.filter {
            !memory.contains($0.key) && !flights.isRunning(FlightKey(block: $0.key, epoch: epoch))
        }
        let span = UInt64(max(1, config.readAheadSpanBlocks))
        var run: [BlockRequest] = []
        for request in wanted {
            if let last = run.last, last.key.index + 1 != request.key.index || request.key.index / span != last.key.index / span {
                submitSpan(run, epoch: epoch, droppedByReader: droppedByReader)
                run = []
            }
            run.append(request)
        }
        submitSpan(run, epoch: epoch, droppedByReader: droppedByReader)
    }

    private func submitSpan(_ requests: [BlockRequest], epoch: Int, droppedByReader: @escaping @Sendable (UInt64) -> Bool) {
        guard !requests.isEmpty else { return }
        readAheadPool.submit { [self] in fetchSpan(requests, epoch: epoch, droppedByReader: droppedByReader) }
    }

    private typealias Claim = SingleFlight<FlightKey, CachedBlock>.Claim

    /// Read-ahead's fetch: claims each block of the span that is still neither cached nor on its
    /// way, serves the ones the disk cache has, and downloads each run of the rest with one
    /// request. Read-ahead only serves sequential readers, whose reads get checked: the blocks'
    /// digests are computed here, on the read-ahead threads.
    ///
    /// On a loaded machine a span may run only after its streaming reader, finding nothing on the
    /// way, fetched those blocks itself, read them and dropped them (drop-behind): fetched again,
    /// they would be downloaded twice and stay in memory with no reader left to drop them. So a
    /// block the reader has dropped is given up (checked once claimed, so the reader cannot be
    /// fetching it at that moment; anyone who joined the claim meanwhile fetches it itself).
    private func fetchSpan(_ requests: [BlockRequest], epoch: Int, droppedByReader: @Sendable (UInt64) -> Bool) {
        // Read-ahead queued before a purge is dropped: its reader will ask again if it still cares.
        guard let fileID = requests.first?.key.fileID, isCurrent(epoch, of: fileID) else { return }
        var run: [(request: BlockRequest, claim: Claim)] = []
        for request in requests {
            guard let claim = flights.claim(FlightKey(block: request.key, epoch: epoch)) else {
                download(run, epoch: epoch, droppedByReader: droppedByReader)   // someone else has this one: the run ends here
                run = []
                continue
            }
            if droppedByReader(request.key.index) {
                flights.finish(claim, .failure(.again))
                download(run, epoch: epoch, droppedByReader: droppedByReader)
                run = []
                continue
            }
            guard let block = cached(request, computeDigests: usesPieceDigests, epoch: epoch) else {
                run.append((request, claim))
                continue
            }
            flights.finish(claim, .success(block))
            download(run, epoch: epoch, droppedByReader: droppedByReader)
            run = []
        }
        download(run, epoch: epoch, droppedByReader: droppedByReader)
    }

    /// One ranged download for consecutive claimed blocks. Each block is cached and handed to
    /// its waiting readers as soon as its last byte arrives; if the download breaks off, the
    /// blocks not finished fail with the cause, as a single block's fetch would.
    private func download(_ run: [(request: BlockRequest, claim: Claim)], epoch: Int, droppedByReader: (UInt64) -> Bool) {
        var finished = 0
        let cause = downloadBlocks(run.map(\.request), computeDigests: usesPieceDigests) { position, block in
            let (request, claim) = run[position]
            keepDownloaded(request.key, block, epoch: epoch)
            // Kept first, checked after: a reader that dropped it meanwhile (it marks the block
            // before it drops it) either dropped it after we kept it, or is seen here.
            if droppedByReader(request.key.index) { memory.remove(request.key) }
            flights.finish(claim, .success(block))
            finished = position + 1
        }
        guard let cause, finished < run.count else { return }
        recordFailure(of: run[finished...].map(\.request), cause)
        for (_, claim) in run[finished...] { flights.finish(claim, .failure(.io)) }
    }

    /// Keeps a verified revision whole in the disk cache (for FUSE passthrough), in the background,
    /// from the blocks still cached; a block that is not (evicted) means no copy: nothing is
    /// downloaded for this. One copy at a time per revision.
    func keepWholeFile(fileID: String, rev: String, size: UInt64, path: String) {
        guard let disk, disk.wholeFile(fileID: fileID, rev: rev) == nil else { return }
        let whole = BlockKey(fileID: fileID, rev: rev, index: DiskBlockCache.wholeFileIndex)
        guard assembling.withLock({ $0.insert(whole).inserted }) else { return }
        let blockSize = UInt64(config.blockSize)
        let count = Int((size + blockSize - 1) / blockSize)
        let epoch = self.epoch(of: fileID)
        let submitted = wholeFileWriter.submit { [self] in
            defer { _ = assembling.withLock { $0.remove(whole) } }
            diskWriter.waitUntilIdle()   // blocks still queued for the disk are part of the file
            let kept = disk.storeWholeFile(fileID: fileID, rev: rev, size: size, blockCount: count) { number in
                let key = BlockKey(fileID: fileID, rev: rev, index: UInt64(number))
                let length = Int(min(blockSize, size - UInt64(number) * blockSize))
                if let block = memory.get(key), block.count == length { return block }
                return disk.read(key, length: length).map { CachedBlock(adopting: $0, computeDigests: false) }
            }
            if kept && !isCurrent(epoch, of: fileID) { disk.purge(fileID: fileID, rev: rev) }
            log.debug("disk cache: \(path) (rev \(rev)) \(kept ? "kept whole" : "not kept whole (blocks missing or over budget)")")
        }
        if !submitted { _ = assembling.withLock { $0.remove(whole) } }
    }

    /// Drops every cached block of one revision of a file (memory and disk). Fetches and disk
    /// writes of the file under way see the new epoch and keep nothing (`keepDownloaded`,
    /// `scheduleDiskWrite`), so this never waits for them: the disk writer can stay busy for as
    /// long as a streaming read lasts, and purges run on the write-back engine's event queue.
    func purge(fileID: String, rev: String) {
        purgeEpochs.withLock { $0[Self.slot(fileID)] += 1 }
        memory.purge(fileID: fileID, rev: rev)
        disk?.purge(fileID: fileID, rev: rev)
    }

    /// Waits for background fetches and disk writes to finish (tests, shutdown).
    func waitUntilIdle() {
        readAheadPool.waitUntilIdle()
        diskWriter.waitUntilIdle()
        wholeFileWriter.waitUntilIdle()
    }

    func shutdown() {
        readAheadPool.stop()
        wholeFileWriter.stop(dropQueued: true)
        diskWriter.stop()
    }

    /// A reader's fetch: memory, else the disk cache, else one ranged download of the block.
    private func load(_ request: BlockRequest, epoch: Int) throws(Errno) -> CachedBlock {
        if let block = cached(request, computeDigests: false, epoch: epoch) { return block }
        var fetched: CachedBlock?
        if let cause = downloadBlocks([request], computeDigests: false, ready: { _, block in fetched = block }) {
            recordFailure(of: [request], cause)
        }
        guard let block = fetched else { throw .io }
        keepDownloaded(request.key, block, epoch: epoch)
        return block
    }

    private static func slot(_ fileID: String) -> Int { Int(UInt(bitPattern: fileID.hashValue) % 256) }

    private func epoch(of fileID: String) -> Int { purgeEpochs.withLock { $0[Self.slot(fileID)] } }

    /// Whether no purge of the file has happened since `epoch`: only then may a fetch put what it
    /// read into the caches.
    private func isCurrent(_ epoch: Int, of fileID: String) -> Bool { self.epoch(of: fileID) == epoch }

    /// The block from memory (fetched while we queued), else from the disk cache (then kept in
    /// memory too); nil if neither has it.
    private func cached(_ request: BlockRequest, computeDigests: Bool, epoch: Int) -> CachedBlock? {
        if let block = memory.get(request.key) { return block }
        guard let disk, let storage = disk.read(request.key, length: request.length) else { return nil }
        let block = CachedBlock(adopting: storage, computeDigests: computeDigests)
        keepInMemory(request.key, block, epoch: epoch)
        return block
    }

    /// Puts a downloaded block in memory and hands it to the disk writer, unless a purge came
    /// since the fetch began.
    private func keepDownloaded(_ key: BlockKey, _ block: CachedBlock, epoch: Int) {
        guard keepInMemory(key, block, epoch: epoch) else { return }
        scheduleDiskWrite(key, block, epoch: epoch)
    }

    /// Puts the block in memory unless its file was purged since `epoch`. Kept first, checked
    /// after: a purge that came meanwhile either dropped it after we kept it, or is seen here.
    @discardableResult
    private func keepInMemory(_ key: BlockKey, _ block: CachedBlock, epoch: Int) -> Bool {
        guard isCurrent(epoch, of: key.fileID) else { return false }
        memory.put(key, block)
        guard isCurrent(epoch, of: key.fileID) else {
            memory.remove(key)
            return false
        }
        return true
    }

    /// Downloads consecutive blocks of one file with one ranged request, straight into each
    /// block's buffer (the only copy on the way in), and hands each block to `ready` (with its
    /// position in `requests`) as soon as its last byte has arrived. Returns nil if every block
    /// was handed over, else why the rest were not.
    private func downloadBlocks(_ requests: [BlockRequest], computeDigests: Bool,
                                ready: (Int, CachedBlock) -> Void) -> FetchFailure? {
        guard let first = requests.first, let last = requests.last else { return nil }
        var storage = CachedBlock.allocateStorage(byteCount: first.length)
        var filling = 0   // the block `storage` is for
        var received = 0  // bytes of it so far
        var failure: RemoteError?
        do throws(RemoteError) {
            try remote.download(path: first.path, rev: first.key.rev, range: first.range.lowerBound..<last.range.upperBound) { chunk in
                var rest = chunk
                while !rest.isEmpty {
                    // More bytes than asked for (DropboxClient already cuts a server's surplus).
                    guard filling < requests.count else { return false }
                    let count = min(rest.count, storage.count - received)
                    UnsafeMutableRawBufferPointer(rebasing: storage[received..<(received + count)])
                        .copyMemory(from: UnsafeRawBufferPointer(rebasing: rest[..<count]))
                    received += count
                    rest = UnsafeRawBufferPointer(rebasing: rest[count...])
                    guard received == storage.count else { continue }
                    ready(filling, CachedBlock(adopting: storage, computeDigests: computeDigests))
                    filling += 1
                    received = 0
                    storage = filling < requests.count
                        ? CachedBlock.allocateStorage(byteCount: requests[filling].length)
                        : UnsafeMutableRawBufferPointer(start: nil, count: 0)
                }
                return true
            }
        } catch {
            failure = error
        }
        guard filling < requests.count else { return nil }
        CachedBlock.releaseStorage(storage)
        if let failure { return FetchFailure(failure) }
        let expected = Int(last.range.upperBound - first.range.lowerBound)
        let got = Int(requests[filling].range.lowerBound - first.range.lowerBound) + received
        return FetchFailure(cause: "the server sent \(got) of \(expected) bytes", errno: .io)
    }

    /// Notes why these blocks could not be fetched, for every reader that shared the fetch
    /// (`block(_:)` logs it for them; a read-ahead failure alone is only a debug line).
    private func recordFailure(of requests: [BlockRequest], _ failure: FetchFailure) {
        guard let first = requests.first, let last = requests.last else { return }
        let blocks = first.key.index == last.key.index ? "block \(first.key.index)" : "blocks \(first.key.index) to \(last.key.index)"
        log.debug("download of \(first.path) \(blocks) failed: \(failure.cause)")
        failures.withLock { causes in
            if causes.count > 256 { causes.removeAll() }
            for request in requests { causes[request.key] = failure }
        }
    }

    /// Hands the block to the disk writer, unless more than `diskWriteQueueBytes` already wait:
    /// then the block is simply not written to disk. The disk cache is best effort; no read, and
    /// no read-ahead thread, ever waits for it. (Read-ahead used to wait for room here, which held
    /// a cold streaming read to the disk's write speed.) So a cold read faster than the disk leaves
    /// only part of the file on disk; the memory cache and the kernel page cache still hold the
    /// recent part, and a later read fills the gaps.
    private func scheduleDiskWrite(_ key: BlockKey, _ block: CachedBlock, epoch: Int) {
        guard let disk else { return }
        let size = block.count
        diskQueue.lock()
        guard pendingDiskBytes + size <= config.diskWriteQueueBytes || pendingDiskBytes == 0 else {
            diskQueue.unlock()
            droppedDiskWrites.add(1, ordering: .relaxed)
            log.debug("disk cache: writer busy, block \(key) not written")
            return
        }
        pendingDiskBytes += size
        diskQueue.unlock()
        let submitted = diskWriter.submit { [self] in
            // A purge of the file since the fetch: nothing to write. One during the write: what
            // was written goes again (written, then checked, like `keepInMemory`).
            if isCurrent(epoch, of: key.fileID) {
                disk.write(key, block.buffer)   // `block` is captured, so its bytes stay alive
                if !isCurrent(epoch, of: key.fileID) { disk.discard(key) }
            }
            releaseDiskBytes(size)
        }
        if !submitted { releaseDiskBytes(size) }
    }

    /// Blocks not written to the disk cache because the writer was behind (tests, status).
    var diskWritesDropped: Int { droppedDiskWrites.load(ordering: .relaxed) }

    private func releaseDiskBytes(_ size: Int) {
        diskQueue.lock()
        pendingDiskBytes -= size
        diskQueue.broadcast()
        diskQueue.unlock()
    }
}

/// Why a block could not be fetched: words for the log line, and the errno the reader gets (EIO,
/// except EACCES for content Dropbox refuses to serve).
struct FetchFailure {
    let cause: String
    let errno: Errno

    init(cause: String, errno: Errno) { self.cause = cause; self.errno = errno }

    init(_ error: RemoteError) {
        cause = "\(error)"
        if case .restrictedContent = error { errno = Errno(error) } else { errno = .io }
    }
}
