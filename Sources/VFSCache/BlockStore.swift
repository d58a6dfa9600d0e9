/// `BlockStore`: where a read gets its bytes. A block comes from memory, else from the disk
/// cache, else from one ranged download; concurrent requests for one block share a single fetch
/// (single-flight). Demand fetches run on the calling FUSE thread (no hand-off latency);
/// read-ahead fetches run on the store's bounded worker pool, in parallel. Downloaded blocks are
/// handed to a separate disk-writer thread, or dropped when it is behind, so no reader waits for
/// the disk cache.
import ContentHash
import Foundation
import Synchronization

final class BlockStore: @unchecked Sendable {
    // @unchecked: `pendingDiskBytes` is only touched with `diskQueue` locked; the rest is immutable
    // or Sendable.
    let memory: MemoryBlockCache
    let disk: DiskBlockCache?
    /// Fetches under way, keyed by block and purge epoch: a fetch that began before a purge is
    /// never joined after it, and does not put what it read back into the caches.
    private struct FlightKey: Hashable, Sendable { var block: BlockKey; var epoch: Int }
    private let flights = SingleFlight<FlightKey, CachedBlock>()
    /// Bumped by every purge.
    private let purgeEpoch = Atomic<Int>(0)
    /// The cause of each block's last failed fetch, so every reader that shared the fetch can log it.
    private let failures = Mutex<[BlockKey: String]>([:])
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
            let epoch = purgeEpoch.load(ordering: .acquiring)
            return try flights.run(FlightKey(block: request.key, epoch: epoch), deadline: deadline) { () throws(Errno) in
                try load(request, background: false, epoch: epoch)
            }
        } catch {
            let cause = error == .timedOut
                ? "not fetched within \(config.readTimeout) s"
                : failures.withLock { $0[request.key] } ?? "\(error)"
            log.error("read of \(request.path) (rev \(request.key.rev)) bytes \(request.range.lowerBound)..<\(request.range.upperBound) failed: \(cause)")
            throw .io
        }
    }

    /// Starts fetching the block in the background unless it is cached or already on its way.
    func prefetch(_ request: BlockRequest) {
        let epoch = purgeEpoch.load(ordering: .acquiring)
        let key = FlightKey(block: request.key, epoch: epoch)
        if memory.contains(request.key) || flights.isRunning(key) { return }
        readAheadPool.submit { [self] in
            // Read-ahead only serves sequential readers, whose reads get checked: hash here, in parallel.
            flights.runIfIdle(key) { () throws(Errno) in try load(request, background: true, epoch: epoch) }
        }
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
        let epoch = purgeEpoch.load(ordering: .acquiring)
        let submitted = wholeFileWriter.submit { [self] in
            defer { _ = assembling.withLock { $0.remove(whole) } }
            diskWriter.waitUntilIdle()   // blocks still queued for the disk are part of the file
            let kept = disk.storeWholeFile(fileID: fileID, rev: rev, size: size, blockCount: count) { number in
                let key = BlockKey(fileID: fileID, rev: rev, index: UInt64(number))
                let length = Int(min(blockSize, size - UInt64(number) * blockSize))
                if let block = memory.get(key), block.count == length { return block }
                return disk.read(key, length: length).map { CachedBlock(adopting: $0, computeDigests: false) }
            }
            if kept && purgeEpoch.load(ordering: .acquiring) != epoch { disk.purge(fileID: fileID, rev: rev) }
            log.debug("disk cache: \(path) (rev \(rev)) \(kept ? "kept whole" : "not kept whole (blocks missing or over budget)")")
        }
        if !submitted { _ = assembling.withLock { $0.remove(whole) } }
    }

    /// Drops every cached block of one revision of a file (memory and disk).
    func purge(fileID: String, rev: String) {
        purgeEpoch.add(1, ordering: .releasing)
        memory.purge(fileID: fileID, rev: rev)
        diskWriter.waitUntilIdle()   // a queued write must not resurrect a purged block
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

    private func load(_ request: BlockRequest, background: Bool, epoch: Int) throws(Errno) -> CachedBlock {
        let eagerDigests = background && usesPieceDigests
        let current = { self.purgeEpoch.load(ordering: .acquiring) == epoch }
        // Read-ahead queued before a purge is dropped: its reader will ask again if it still cares.
        if background && !current() { throw Errno(ECANCELED) }
        if let block = memory.get(request.key) { return block }   // fetched while we queued
        if let disk, let storage = disk.read(request.key, length: request.length) {
            let block = CachedBlock(adopting: storage, computeDigests: eagerDigests)
            if current() { memory.put(request.key, block) }
            return block
        }
        let block = CachedBlock(adopting: try download(request), computeDigests: eagerDigests)
        if current() {
            memory.put(request.key, block)
            scheduleDiskWrite(request.key, block)
        }
        return block
    }

    /// One ranged download straight into the block's buffer (the only copy on the way in).
    /// Returns the buffer, fully written; the caller owns it.
    private func download(_ request: BlockRequest) throws(Errno) -> UnsafeMutableRawBufferPointer {
        let length = request.length
        let storage = CachedBlock.allocateStorage(byteCount: length)
        var failure: RemoteError?
        var received = 0
        do throws(RemoteError) {
            try remote.download(path: request.path, rev: request.key.rev, range: request.range) { chunk in
                guard received + chunk.count <= length else { return false }
                if chunk.count > 0 {
                    UnsafeMutableRawBufferPointer(rebasing: storage[received..<(received + chunk.count)]).copyMemory(from: chunk)
                }
                received += chunk.count
                return true
            }
        } catch {
            failure = error
        }
        var cause: String?
        if let failure {
            cause = "\(failure)"
        } else if received != length {
            cause = "the server sent \(received) of \(length) bytes"
        }
        guard let cause else { return storage }
        CachedBlock.releaseStorage(storage)
        // Logged by `block(_:)` for readers; background read-ahead failures only at debug level.
        log.debug("download of \(request.path) block \(request.key.index) failed: \(cause)")
        failures.withLock { causes in
            if causes.count > 256 { causes.removeAll() }
            causes[request.key] = cause
        }
        throw .io
    }

    /// Hands the block to the disk writer, unless more than `diskWriteQueueBytes` already wait:
    /// then the block is simply not written to disk. The disk cache is best effort; no read, and
    /// no read-ahead thread, ever waits for it. (Read-ahead used to wait for room here, which held
    /// a cold streaming read to the disk's write speed.) So a cold read faster than the disk leaves
    /// only part of the file on disk; the memory cache and the kernel page cache still hold the
    /// recent part, and a later read fills the gaps.
    private func scheduleDiskWrite(_ key: BlockKey, _ block: CachedBlock) {
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
            disk.write(key, block.buffer)   // `block` is captured, so its bytes stay alive
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
