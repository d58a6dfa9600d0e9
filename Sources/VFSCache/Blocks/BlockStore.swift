/// `BlockStore`: where a read gets its bytes. A block comes from memory, else from the disk
/// cache, else from one ranged download. Concurrent requests for one block share one fetch
/// (`BlockFlights`), and a reader takes the bytes it needs as soon as they arrive, not when the
/// whole block has. Sequential readers fetch whole blocks: a reader's own block on the store's
/// fetch pool, read-ahead on its read-ahead pool (a span of several blocks per download), both in
/// parallel. Random readers fetch fragments on their own thread (`VFSConfig.fragmentBytes`,
/// aligned, more at once the longer a reader stays sequential): a 4 KiB read costs a 128 KiB
/// download, not a 4 MiB one. Downloaded blocks are handed to a separate disk-writer thread, or
/// dropped when it is behind, so no reader waits for the disk cache. Random readers' bytes live in
/// a memory cache of their own (`scattered`, small), apart from the sequential readers' (`memory`,
/// which holds their read-ahead window): fragments, and fragments read back from blocks on disk.
/// At long round trips their blocks are completed, and small enough files fetched whole, in the
/// background straight into the disk cache (`BackgroundFill`).
import ContentHash
import Foundation
import Synchronization

final class BlockStore: @unchecked Sendable {
    // @unchecked: `pendingDiskBytes` is only touched with `diskQueue` locked; the rest is immutable
    // or Sendable.
    let memory: MemoryBlockCache
    /// Random readers' fragments (and, without a disk cache, their completed blocks), under a
    /// budget of their own (`VFSConfig.randomReadMemoryBytes`): however much of a file random
    /// readers touch, the daemon's memory does not grow with it.
    let scattered: MemoryBlockCache
    let disk: DiskBlockCache?
    /// Fetches under way, keyed by block and purge epoch: a fetch that began before a purge of its
    /// file is never joined after it, and does not put what it read back into the caches.
    private struct FlightKey: Hashable, Sendable { var block: BlockKey; var epoch: Int }
    private let flights = BlockFlights<FlightKey>()
    private typealias Fetch = BlockFlights<FlightKey>.Fetch
    /// Purge epochs by file id, in 256 slots: each purge bumps its file's slot. Per file because
    /// purges are frequent (every commit of a file that had a rev replaces that rev): one must not
    /// make every other file's read-ahead throw away what it fetched.
    private let purgeEpochs = Mutex<[Int]>(Array(repeating: 0, count: 256))
    /// The cause of each block's last failed fetch (by block, fragments included), so every reader
    /// that shared the fetch can log it.
    private let failures = Mutex<[BlockKey: FetchFailure]>([:])
    /// Whether the content-hash check uses the blocks' 4 MiB piece digests (see `CachedBlock`).
    let usesPieceDigests: Bool
    /// Fragment size in use (`VFSConfig.fragmentBytes`); 0 when every fetch is a whole block.
    let fragmentBytes: Int
    /// Round trip of fragment downloads, in microseconds (`noteFragmentRoundTrip`), and how many
    /// were timed.
    private let fragmentRoundTrip = Atomic<Int>(0)
    private let fragmentRoundTrips = Atomic<Int>(0)
    /// Random readers' blocks completed, and files filled, in the background. Set once, at the
    /// end of `init` (its jobs call back into this store).
    private(set) var fill: BackgroundFill!
    private let readAheadPool: WorkerPool
    /// Whole blocks a reader waits for: downloaded here, so the reader can take its bytes as they
    /// arrive while the rest of the block follows.
    private let fetchPool: WorkerPool
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
        memory = MemoryBlockCache(budget: config.memoryCacheBytes, observer: config.observer)
        scattered = MemoryBlockCache(budget: config.randomReadMemoryBytes, observer: config.observer)
        usesPieceDigests = config.verifyContentHash && config.blockSize % DropboxContentHasher.blockSize == 0
        let fragment = config.fragmentBytes
        fragmentBytes = fragment > 0 && fragment < config.blockSize && config.blockSize % fragment == 0 ? fragment : 0
        readAheadPool = WorkerPool(name: "dbxfs-readahead", threads: config.readAheadParallelism)
        fetchPool = WorkerPool(name: "dbxfs-fetch", threads: config.readAheadParallelism)
        diskWriter = WorkerPool(name: "dbxfs-diskcache", threads: 2)
        wholeFileWriter = WorkerPool(name: "dbxfs-wholefile", threads: 1)
        fill = BackgroundFill(threads: config.backgroundFillParallelism, spanBlocks: config.readAheadSpanBlocks) { [unowned self] job in
            fillBlocks(job)
        }
        // Memory for the first cold reads, ready before they come (BlockBufferPool.prefill).
        let blocks = config.prefilledBlockBuffers, blockSize = config.blockSize
        if blocks > 0 {
            readAheadPool.submit { BlockBufferPool.shared.prefill(count: blocks, byteCount: blockSize) }
        }
    }

    /// What a read asks to be downloaded when its bytes are not cached.
    enum FetchSize: Equatable, Sendable {
        /// The whole block (sequential readers: read-ahead and the content-hash check need it).
        case wholeBlock
        /// About this many bytes around the read, in fragments (random readers), of a file of
        /// `fileSize` bytes.
        case around(Int, fileSize: UInt64)
    }

    /// Bytes a reader asked for: `bytes` of `block`'s buffer (filled at least that far), which
    /// is a whole block (`isWholeBlock`: the content-hash check may use its piece digests) or a
    /// fragment.
    struct Slice {
        let block: CachedBlock
        let bytes: Range<Int>
        let isWholeBlock: Bool
    }

    /// The bytes `within` (offsets inside the block) of block `request`, waiting for a fetch
    /// already under way if there is one, and only until those bytes are in. Failures are EIO
    /// (EACCES for content Dropbox refuses), with one error line naming the file, the range and
    /// the cause. `droppedByReader`, as for `prefetch`: a block this read downloads and the
    /// streaming reader has dropped by the time it is kept is not kept.
    func read(_ request: BlockRequest, within: Range<Int>, fetch size: FetchSize,
              droppedByReader: @escaping @Sendable (UInt64) -> Bool = { _ in false }) throws(Errno) -> [Slice] {
        let started = ContinuousClock.now
        if let block = memory.get(request.key) ?? scattered.get(request.key) {
            config.observer?.blockHit(in: .memory)
            if case .around = size { trace(request, within, "memory", since: started) }
            return [Slice(block: block, bytes: within, isWholeBlock: true)]
        }
        let deadline = Date(timeIntervalSinceNow: config.readTimeout)
        do throws(Errno) {
            if case .around(let bytes, let fileSize) = size,
               let slices = try fragments(of: request, within: within, around: bytes, fileSize: fileSize, deadline: deadline) {
                trace(request, within, "fragments", since: started)
                return slices
            }
            let block = try wholeBlock(request, prefix: within.upperBound, deadline: deadline, droppedByReader: droppedByReader)
            if case .around = size { trace(request, within, "block", since: started) }
            return [Slice(block: block, bytes: within, isWholeBlock: true)]
        } catch {
            let failure = failures.withLock { $0[request.key] }
            let cause = error == .timedOut ? "not fetched within \(config.readTimeout) s" : failure?.cause ?? "\(error)"
            let from = request.range.lowerBound + UInt64(within.lowerBound)
            let to = request.range.lowerBound + UInt64(within.upperBound)
            log.error("read of \(request.path) (rev \(request.key.rev)) bytes \(from) to \(to) failed: \(cause)")
            throw error == .timedOut ? .io : error
        }
    }

    /// When this store began, for the read trace's times.
    private let createdAt = ContinuousClock.now

    /// One debug line per random read: when (seconds since the mount), which block, where its
    /// bytes came from and how long the read waited. What the random-read analysis in
    /// docs/BENCHMARKS.md was measured with.
    private func trace(_ request: BlockRequest, _ within: Range<Int>, _ source: String, since started: ContinuousClock.Instant) {
        guard log.level >= .debug else { return }
        let now = ContinuousClock.now
        let at = (now - createdAt) / .milliseconds(1), waited = (now - started) / .milliseconds(1)
        log.debug("read trace: t \(String(format: "%.1f", at)) ms, block \(request.key.index) at \(within.lowerBound), \(source), waited \(String(format: "%.2f", waited)) ms")
    }

    /// The whole block, every byte in (the write side copies blocks out whole).
    func block(_ request: BlockRequest) throws(Errno) -> CachedBlock {
        try read(request, within: 0..<request.length, fetch: .wholeBlock)[0].block
    }

    /// The block once its first `prefix` bytes are in: from memory or the disk, else from the
    /// fetch under way, else from a download this call starts on the fetch pool.
    ///
    /// The read returns once its own bytes are in; the download keeps the block after its last
    /// byte. A streaming reader may be two blocks on and have dropped this one by then (a loaded
    /// machine: `VFSDataTests.aStreamingReaderDropsTheBlocksItHasPassed` found blocks 0, 4 and
    /// 20 of 32 left in memory), so the download checks `droppedByReader` after keeping it.
    private func wholeBlock(_ request: BlockRequest, prefix: Int, deadline: Date,
                            droppedByReader: @escaping @Sendable (UInt64) -> Bool) throws(Errno) -> CachedBlock {
        while true {
            let epoch = self.epoch(of: request.key.fileID)
            let (fetch, claimed) = flights.joinOrClaim(FlightKey(block: request.key, epoch: epoch))
            if claimed {
                if let block = cached(request, computeDigests: false, epoch: epoch) {
                    flights.finish(fetch, .success(block))
                    return block
                }
                let submitted = fetchPool.submit { [self] in
                    download([(request, fetch)], epoch: epoch, computeDigests: false, droppedByReader: droppedByReader)
                }
                if !submitted { flights.finish(fetch, .failure(.io)) }
            }
            do throws(Errno) {
                return try fetch.wait(forPrefix: prefix, until: deadline)
            } catch where error == .again {
                // We joined a read-ahead that gave this block up (`fetchSpan`): fetch it ourselves.
                if let block = memory.get(request.key) { return block }
            }
        }
    }

    /// A random reader's bytes from fragments of the block: those in memory, those on their way,
    /// those read from the block on disk, and the rest downloaded now, on this thread (small: no
    /// hand-off), `around` bytes rounded up to a power-of-two number of fragments, aligned,
    /// covering the read, in one request; or the block itself when it is on its way and nearly at
    /// these bytes. nil when the whole block should be read instead (`around` covers it).
    ///
    /// Fragments are served as any ranged HTTP read is, without a content-hash check: a 4 MiB
    /// piece's digest needs the whole piece. The whole-file check concerns sequential readers,
    /// which read whole blocks (docs/VFSCACHE.md, "Fragments").
    private func fragments(of request: BlockRequest, within: Range<Int>, around: Int, fileSize: UInt64,
                           deadline: Date) throws(Errno) -> [Slice]? {
        let piece = fragmentBytes
        guard piece > 0, request.length > piece else { return nil }
        var group = piece
        while group < around { group *= 2 }
        guard group < request.length else { return nil }
        let epoch = self.epoch(of: request.key.fileID)
        // The block on disk beats a round trip: its fragments are read from there (not all of it:
        // memory for random readers stays small). On its way, the whole block does if its bytes
        // are about to reach ours (it arrives in order: bytes near its end may be a long transfer
        // away).
        if let slices = fragmentsFromDisk(of: request, within: within) { return slices }
        // The arriving block is waited for here, not through `wholeBlock`: had it just finished,
        // `wholeBlock` would load all 4 MiB of it back from disk into `memory` (the sequential
        // readers' cache) for these few bytes.
        if let whole = flights.existing(FlightKey(block: request.key, epoch: epoch)), whole.filled + 2 * piece >= within.upperBound {
            do throws(Errno) {
                return [Slice(block: try whole.wait(forPrefix: within.upperBound, until: deadline), bytes: within, isWholeBlock: true)]
            } catch where error == .again {
                // Gone to disk (the fill let go of it), or the fill stopped.
                if let slices = fragmentsFromDisk(of: request, within: within) { return slices }
            }
        }
        let first = within.lowerBound / piece, last = (within.upperBound - 1) / piece
        let groupStart = within.lowerBound / group * group
        let groupFirst = groupStart / piece
        let groupLast = min((request.length - 1) / piece, max(last, (groupStart + group) / piece - 1))

        var found: [Int: CachedBlock] = [:]
        var fetches: [Int: Fetch] = [:]
        var runs: [[(request: BlockRequest, fetch: Fetch)]] = [[]]
        for part in groupFirst...groupLast {
            let fragment = request.fragment(part, fragmentBytes: piece)
            let needed = part >= first && part <= last
            if needed, let block = scattered.get(fragment.key) {
                found[part] = block
            } else if !needed, scattered.contains(fragment.key) {
                // Cached already: the run of fragments to download ends here.
            } else {
                let (fetch, claimed) = flights.joinOrClaim(FlightKey(block: fragment.key, epoch: epoch))
                if needed { fetches[part] = fetch }
                if claimed {
                    runs[runs.count - 1].append((fragment, fetch))
                    continue
                }
            }
            if !runs[runs.count - 1].isEmpty { runs.append([]) }
        }
        let started = Date()
        for run in runs where !run.isEmpty { download(run, epoch: epoch, computeDigests: false) }
        if runs[0].count > 0, case let roundTrip = noteFragmentRoundTrip(Date().timeIntervalSince(started)),
           roundTrip >= config.completeBlocksAfterRoundTrip {
            let file = BackgroundFill.File(fileID: request.key.fileID, rev: request.key.rev, path: request.path,
                                           size: fileSize, blockSize: config.blockSize)
            // The whole file only on firmer evidence of a far server: each reader's first download
            // opens a connection (TCP and TLS handshakes, two more round trips), so the first
            // samples make any server look far, and on a loaded machine CPU waits alone pass 10 ms.
            // Filling a file on loopback by mistake cost 4x (bench-read-ab at load 14-17: 259
            // instead of ~1000 ops/s): a fill costs the CPU of the whole file.
            let wholeFile = fragmentRoundTrips.load(ordering: .relaxed) >= config.fillAfterFragmentDownloads
                && roundTrip >= config.fillFilesAfterRoundTrip && mayFillWholeFile(size: fileSize)
            if fill.touched(request.key.index, of: file, epoch: epoch, wholeFile: wholeFile) {
                log.debug("read of \(request.path): read at random at long round trips, the rest of it is fetched in the background")
            }
        }

        var slices: [Slice] = []
        slices.reserveCapacity(last - first + 1)
        for part in first...last {
            let start = part * piece
            let bytes = (max(within.lowerBound, start) - start)..<(min(within.upperBound, start + piece) - start)
            let block: CachedBlock
            if let cachedBlock = found[part] {
                block = cachedBlock
            } else if let fetch = fetches[part] {
                block = try fetch.wait(forPrefix: bytes.upperBound, until: deadline)
            } else {
                throw .io   // not reached: every fragment needed was found or fetched
            }
            slices.append(Slice(block: block, bytes: bytes, isWholeBlock: false))
        }
        return slices
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
        readAheadPool.submit { [self] in
            fetchSpan(requests, epoch: epoch, computeDigests: usesPieceDigests, droppedByReader: droppedByReader)
        }
    }

    /// The fragments of the block holding `within`, when the block is on disk: from `scattered`,
    /// else read from the disk cache (one aligned fragment each) and kept in `scattered`. nil when
    /// the disk cache does not have the block (or fails to read it).
    private func fragmentsFromDisk(of request: BlockRequest, within: Range<Int>) -> [Slice]? {
        guard let disk, disk.contains(request.key) else { return nil }
        let piece = fragmentBytes
        let epoch = self.epoch(of: request.key.fileID)
        var slices: [Slice] = []
        for part in (within.lowerBound / piece)...((within.upperBound - 1) / piece) {
            let fragment = request.fragment(part, fragmentBytes: piece)
            let start = part * piece
            let bytes = (max(within.lowerBound, start) - start)..<(min(within.upperBound, start + piece) - start)
            if let block = scattered.get(fragment.key) {
                slices.append(Slice(block: block, bytes: bytes, isWholeBlock: false))
                continue
            }
            guard let storage = disk.read(request.key, length: request.length, range: start..<(start + fragment.length)) else { return nil }
            config.observer?.blockHit(in: .disk)
            let block = CachedBlock(adopting: storage, computeDigests: false)
            keepInMemory(fragment.key, block, epoch: epoch)
            slices.append(Slice(block: block, bytes: bytes, isWholeBlock: false))
        }
        return slices
    }

    /// Whether a file of `size` bytes read at random may be fetched whole in the background: it
    /// fits `VFSConfig.fillFilesReadAtRandomUpTo` and a quarter of the disk cache's budget (so a
    /// fill never pushes most of the cache out, and a big disk image read at random is never
    /// downloaded whole by surprise).
    private func mayFillWholeFile(size: UInt64) -> Bool {
        guard let disk, config.fillFilesReadAtRandomUpTo > 0 else { return false }
        return size <= UInt64(config.fillFilesReadAtRandomUpTo) && Int64(clamping: size) <= disk.budget / 4
    }

    /// A background fill's job: the blocks of the span that are cached nowhere and not on their
    /// way, claimed and downloaded run by run, each straight into the disk cache (not memory:
    /// `keepFilled`). Blocks already in memory or on disk are skipped, not read.
    private func fillBlocks(_ job: BackgroundFill.Job) {
        guard let fileID = job.blocks.first?.key.fileID, isCurrent(job.epoch, of: fileID) else { return }
        var run: [(request: BlockRequest, fetch: Fetch)] = []
        func downloadRun() {
            if job.stillWanted() {
                download(run, epoch: job.epoch, computeDigests: false, intoDisk: true, stillWanted: job.stillWanted)
            } else {
                for (_, fetch) in run { flights.finish(fetch, .failure(.again)) }   // whoever joined fetches it
            }
            run = []
        }
        for request in job.blocks {
            guard job.stillWanted() else { break }
            let cached = memory.contains(request.key) || scattered.contains(request.key) || disk?.contains(request.key) == true
            guard !cached, let fetch = flights.claim(FlightKey(block: request.key, epoch: job.epoch)) else {
                downloadRun()   // cached, or someone else has this one: the run ends here
                continue
            }
            run.append((request, fetch))
        }
        downloadRun()
    }

    /// A block the background fill downloaded: written to the disk cache here and now (the fill's
    /// thread waits for it, so no block waits in memory for the disk writer), and the random
    /// readers' fragments of it dropped. Without a disk cache (or if the write fails) it goes to
    /// `scattered`, whose budget bounds it.
    private func keepFilled(_ key: BlockKey, _ block: CachedBlock, epoch: Int) {
        guard isCurrent(epoch, of: key.fileID) else { return }
        if let disk, disk.write(key, block.buffer) {
            if !isCurrent(epoch, of: key.fileID) { disk.discard(key); return }
            scattered.dropFragments(of: key)
            return
        }
        keepInMemory(key, block, epoch: epoch, randomReaders: true)
    }

    /// The readers of a file are gone (its last handle closed): its background fill stops.
    func readersGone(fileID: String) { fill.stop(fileID: fileID) }

    /// Records how long a fragment download took and returns the round-trip estimate (seconds),
    /// against which blocks are completed (and files filled) in the background. The estimate is
    /// a slowly rising minimum (in microseconds): a fetch is the round trip plus waiting for a busy CPU, and on a loaded
    /// machine the wait alone passed 10 ms on loopback, where completing blocks cost four times
    /// the random reads' speed (CPU, not the network, was short); the fastest recent fetches
    /// show the round trip itself.
    private func noteFragmentRoundTrip(_ seconds: Double) -> Double {
        let sample = Int(seconds * 1_000_000)
        fragmentRoundTrips.add(1, ordering: .relaxed)
        var current = fragmentRoundTrip.load(ordering: .relaxed)
        while true {
            let estimate = current == 0 || sample < current ? sample : current + (sample - current) / 32
            let (exchanged, original) = fragmentRoundTrip.compareExchange(expected: current, desired: estimate, ordering: .relaxed)
            if exchanged { return Double(estimate) / 1_000_000 }
            current = original
        }
    }

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
    private func fetchSpan(_ requests: [BlockRequest], epoch: Int, computeDigests: Bool, droppedByReader: @Sendable (UInt64) -> Bool) {
        // Read-ahead queued before a purge is dropped: its reader will ask again if it still cares.
        guard let fileID = requests.first?.key.fileID, isCurrent(epoch, of: fileID) else { return }
        var run: [(request: BlockRequest, fetch: Fetch)] = []
        func downloadRun() {
            download(run, epoch: epoch, computeDigests: computeDigests, droppedByReader: droppedByReader)
            run = []
        }
        for request in requests {
            guard let fetch = flights.claim(FlightKey(block: request.key, epoch: epoch)) else {
                downloadRun()   // someone else has this one: the run ends here
                continue
            }
            if droppedByReader(request.key.index) {
                flights.finish(fetch, .failure(.again))
                downloadRun()
                continue
            }
            guard let block = cached(request, computeDigests: computeDigests, epoch: epoch) else {
                run.append((request, fetch))
                continue
            }
            flights.finish(fetch, .success(block))
            downloadRun()
        }
        downloadRun()
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

    /// The bytes the mount wrote, committed as revision `rev` (the write-back engine's staging
    /// file, handed over at the commit), become that revision's whole-file copy in the disk
    /// cache (`DiskBlockCache.adoptWholeFile`). A move is one rename, done on the caller's thread;
    /// a copy (`move` false: an open handle may still write to the file) runs on the whole-file
    /// writer, never on the caller's. Without a disk cache the file is deleted.
    func adoptCommittedFile(fileID: String, rev: String, size: UInt64, contentHash: String?, from source: URL, move: Bool) {
        guard let disk else {
            unlink(source.path)
            return
        }
        guard !move else {
            disk.adoptWholeFile(fileID: fileID, rev: rev, size: size, contentHash: contentHash, from: source.path, move: true)
            return
        }
        guard access(source.path, F_OK) == 0 else { return }   // nothing was handed over
        let submitted = wholeFileWriter.submit {
            disk.adoptWholeFile(fileID: fileID, rev: rev, size: size, contentHash: contentHash, from: source.path, move: false)
        }
        if !submitted { unlink(source.path) }
    }

    /// A block of a pinned file, made sure to be on disk (PinnedFiles.swift): read from the disk
    /// cache, or taken from memory or downloaded and written to disk here and now, not through the
    /// best-effort writer that may skip it. Not put in memory: pinning a tree must not push out
    /// what readers use. The block carries its piece digests for the content-hash check.
    func pinBlock(_ request: BlockRequest) -> Result<CachedBlock, FetchFailure> {
        guard let disk else { return .failure(FetchFailure(cause: "the mount has no disk cache", errno: .io)) }
        if let storage = disk.read(request.key, length: request.length) {
            return .success(CachedBlock(adopting: storage, computeDigests: usesPieceDigests))
        }
        let epoch = self.epoch(of: request.key.fileID)
        var block = memory.get(request.key)
        if block == nil {
            switch downloadAlone(request) {
            case .success(let fetched): block = fetched
            case .failure(let cause): return .failure(cause)
            }
        }
        guard let block else { return .failure(FetchFailure(cause: "the download gave no bytes", errno: .io)) }
        // A purge of the file since we began: the block is of a revision no longer wanted.
        guard isCurrent(epoch, of: request.key.fileID) else { return .failure(FetchFailure(cause: "the file changed meanwhile", errno: .again)) }
        guard disk.write(request.key, block.buffer) else {
            return .failure(FetchFailure(cause: "it could not be written to the disk cache (the log says why)", errno: .io))
        }
        if !isCurrent(epoch, of: request.key.fileID) {
            disk.discard(request.key)
            return .failure(FetchFailure(cause: "the file changed meanwhile", errno: .again))
        }
        return .success(block)
    }

    /// One block downloaded on its own, straight into its buffer, cached nowhere (the pin writes
    /// it to disk itself), with its piece digests for the content-hash check.
    private func downloadAlone(_ request: BlockRequest) -> Result<CachedBlock, FetchFailure> {
        let block = CachedBlock(filling: CachedBlock.allocateStorage(byteCount: request.length))
        do throws(RemoteError) {
            // False (cancel) only for bytes beyond the block, which DropboxClient already cuts.
            try remote.download(path: request.path, rev: request.key.rev, range: request.range) { chunk in
                block.append(chunk) == chunk.count
            }
        } catch {
            return .failure(FetchFailure(error))
        }
        guard block.isWhole else {
            return .failure(FetchFailure(cause: "the server sent \(block.filled) of \(request.length) bytes", errno: .io))
        }
        if usesPieceDigests { block.computeDigests() }
        return .success(block)
    }

    /// Drops every cached block of one revision of a file (memory and disk). Fetches and disk
    /// writes of the file under way see the new epoch and keep nothing (`keepDownloaded`,
    /// `scheduleDiskWrite`), so this never waits for them: the disk writer can stay busy for as
    /// long as a streaming read lasts, and purges run on the write-back engine's event queue.
    func purge(fileID: String, rev: String) {
        purgeEpochs.withLock { $0[Self.slot(fileID)] += 1 }
        memory.purge(fileID: fileID, rev: rev)
        scattered.purge(fileID: fileID, rev: rev)
        disk?.purge(fileID: fileID, rev: rev)
    }

    /// Waits for background fetches and disk writes to finish (tests, shutdown).
    func waitUntilIdle() {
        fill.waitUntilIdle()
        readAheadPool.waitUntilIdle()
        fetchPool.waitUntilIdle()
        diskWriter.waitUntilIdle()
        wholeFileWriter.waitUntilIdle()
    }

    func shutdown() {
        fill.shutdown()
        readAheadPool.stop()
        fetchPool.stop()
        wholeFileWriter.stop(dropQueued: true)
        diskWriter.stop()
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
        config.observer?.blockHit(in: .disk)
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

    /// Puts the block in memory unless its file was purged since `epoch`: fragments, and blocks
    /// kept for random readers (`randomReaders`), in `scattered`; other blocks in `memory`. Kept
    /// first, checked after: a purge that came meanwhile either dropped it after we kept it, or is
    /// seen here.
    @discardableResult
    private func keepInMemory(_ key: BlockKey, _ block: CachedBlock, epoch: Int, randomReaders: Bool = false) -> Bool {
        guard isCurrent(epoch, of: key.fileID) else { return false }
        // Fragments are random readers'; so are whole blocks kept for them (`keepFilled`).
        let cache = key.isWholeBlock && !randomReaders ? memory : scattered
        cache.put(key, block)
        guard isCurrent(epoch, of: key.fileID) else {
            cache.remove(key)
            return false
        }
        return true
    }

    /// One ranged download for consecutive claimed blocks (or fragments) of one file, straight
    /// into each block's buffer (the only copy on the way in). Each block is handed to its fetch
    /// when the download reaches it, so readers take its bytes as they arrive; once whole it is
    /// cached and its fetch finished. If the download breaks off, the blocks not finished fail
    /// with the cause, as a single block's fetch would (a reader whose bytes had arrived keeps
    /// them).
    ///
    /// `intoDisk`: the background fill's blocks, kept on disk rather than in memory
    /// (`keepFilled`). Once `stillWanted` says no (the file's readers are gone), the download
    /// stops at its next bytes and the blocks not finished fail with EAGAIN (whoever joined them
    /// fetches them itself).
    private func download(_ run: [(request: BlockRequest, fetch: Fetch)], epoch: Int, computeDigests: Bool,
                          intoDisk: Bool = false, stillWanted: () -> Bool = { true },
                          droppedByReader: (UInt64) -> Bool = { _ in false }) {
        guard let first = run.first?.request, let last = run.last?.request else { return }
        let started = ContinuousClock.now
        defer {
            if log.level >= .debug {
                let now = ContinuousClock.now
                let at = (started - createdAt) / .milliseconds(1), took = (now - started) / .milliseconds(1)
                log.debug("download trace: t \(String(format: "%.1f", at)) ms, \(first.key.isWholeBlock ? "blocks" : "fragments") \(first.key) to \(last.key.index)\(last.key.isWholeBlock ? "" : ".\(last.key.part)"), \(last.range.upperBound - first.range.lowerBound) bytes, took \(String(format: "%.1f", took)) ms")
            }
        }
        var position = 0            // the block being filled
        var filling: CachedBlock?
        var failure: RemoteError?
        do throws(RemoteError) {
            try remote.download(path: first.path, rev: first.key.rev, range: first.range.lowerBound..<last.range.upperBound) { chunk in
                guard stillWanted() else { return false }
                var rest = chunk
                while !rest.isEmpty {
                    // More bytes than asked for (DropboxClient already cuts a server's surplus).
                    guard position < run.count else { return false }
                    let (request, fetch) = run[position]
                    let block: CachedBlock
                    if let filling { block = filling } else {
                        block = CachedBlock(filling: CachedBlock.allocateStorage(byteCount: request.length))
                        filling = block
                        fetch.begin(block)
                    }
                    rest = UnsafeRawBufferPointer(rebasing: rest[block.append(rest)...])
                    fetch.progressed()
                    guard block.isWhole else { continue }
                    config.observer?.blockDownloaded()
                    if computeDigests { block.computeDigests() }
                    if intoDisk { keepFilled(request.key, block, epoch: epoch) } else { keepDownloaded(request.key, block, epoch: epoch) }
                    // Kept first, checked after: a reader that dropped it meanwhile (it marks the
                    // block before it drops it) either dropped it after we kept it, or is seen here.
                    if droppedByReader(request.key.index) { memory.remove(request.key) }
                    flights.finish(fetch, .success(block))
                    if intoDisk { fetch.dropBlock() }
                    position += 1
                    filling = nil
                }
                return true
            }
        } catch {
            failure = error
        }
        guard position < run.count else { return }
        filling?.markBroken()
        let cause: FetchFailure
        if !stillWanted() {
            for (_, fetch) in run[position...] { flights.finish(fetch, .failure(.again)) }
            return
        } else if let failure {
            cause = FetchFailure(failure)
        } else {
            let expected = Int(last.range.upperBound - first.range.lowerBound)
            let got = Int(run[position].request.range.lowerBound - first.range.lowerBound) + (filling?.filled ?? 0)
            cause = FetchFailure(cause: "the server sent \(got) of \(expected) bytes", errno: .io)
        }
        recordFailure(of: run[position...].map(\.request), cause)
        for (_, fetch) in run[position...] { flights.finish(fetch, .failure(cause.errno)) }
    }

    /// Notes why these blocks could not be fetched, for every reader that shared the fetch
    /// (`read` logs it for them; a read-ahead failure alone is only a debug line).
    private func recordFailure(of requests: [BlockRequest], _ failure: FetchFailure) {
        guard let first = requests.first, let last = requests.last else { return }
        let blocks = !first.key.isWholeBlock
            ? "bytes \(first.range.lowerBound) to \(last.range.upperBound)"
            : first.key.index == last.key.index ? "block \(first.key.index)" : "blocks \(first.key.index) to \(last.key.index)"
        log.debug("download of \(first.path) \(blocks) failed: \(failure.cause)")
        failures.withLock { causes in
            if causes.count > 256 { causes.removeAll() }
            // By block: a fragment's failure is the cause for a read of its block.
            for request in requests { causes[request.key.wholeBlock] = failure }
        }
    }

    /// Hands the block to the disk writer, unless more than `diskWriteQueueBytes` already wait:
    /// then the block is simply not written to disk. The disk cache is best effort; no read, and
    /// no read-ahead thread, ever waits for it. (Read-ahead used to wait for room here, which held
    /// a cold streaming read to the disk's write speed.) So a cold read faster than the disk leaves
    /// only part of the file on disk; the memory cache and the kernel page cache still hold the
    /// recent part, and a later read fills the gaps.
    private func scheduleDiskWrite(_ key: BlockKey, _ block: CachedBlock, epoch: Int) {
        guard let disk, key.isWholeBlock else { return }   // fragments stay in memory
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
struct FetchFailure: Error {
    let cause: String
    let errno: Errno

    init(cause: String, errno: Errno) { self.cause = cause; self.errno = errno }

    init(_ error: RemoteError) {
        cause = "\(error)"
        if case .restrictedContent = error { errno = Errno(error) } else { errno = .io }
    }
}
