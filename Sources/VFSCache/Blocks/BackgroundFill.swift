/// `BackgroundFill`: what random readers get fetched for them in the background, when round trips
/// are long (docs/VFSCACHE.md, "Random readers at long round trips"). A random read that misses
/// waits one round trip for its fragment; later reads only avoid that wait if their bytes were
/// fetched meanwhile. So every block a random read touches is completed whole in the background
/// (touched blocks go first: a reader often comes back near where it was), and once random reads
/// have touched enough blocks of a file small enough for the disk cache, the rest of the file
/// follows in large ranges over parallel connections (Dropbox caps each connection; a client fills
/// a link with several). It all stops when the file's last handle is closed.
///
/// This type is the scheduling only: which job runs next, which are stale. `BlockStore` does the
/// fetching (`run`), into the disk cache rather than memory.
import Foundation
import Synchronization

final class BackgroundFill: Sendable {
    /// What a job needs to know about its file.
    struct File: Sendable {
        var fileID: String
        var rev: String
        var path: String
        var size: UInt64
        var blockSize: Int

        var blockCount: UInt64 { (size + UInt64(blockSize) - 1) / UInt64(blockSize) }

        func block(_ index: UInt64) -> BlockRequest {
            let start = index * UInt64(blockSize)
            return BlockRequest(key: BlockKey(fileID: fileID, rev: rev, index: index), path: path,
                                range: start..<min(start + UInt64(blockSize), size))
        }
    }

    /// Blocks to fetch with one ranged download (consecutive, of one file), while `stillWanted`.
    struct Job: Sendable {
        var blocks: [BlockRequest]
        var epoch: Int
        var stillWanted: @Sendable () -> Bool
    }

    /// Set once a file's readers are gone: its running downloads stop at their next bytes.
    private final class Stopped: Sendable {
        let flag = Atomic<Bool>(false)
    }

    /// A file being filled: the blocks its random reads touched, whether the rest of it was
    /// queued.
    private struct FileState {
        var touched: Set<UInt64> = []
        /// Touched blocks queued for completion (a touch while the queue was full is not).
        var requested: Set<UInt64> = []
        var wholeFileQueued = false
        let stopped = Stopped()
    }

    private struct Queues {
        /// Touched blocks, one job each, ahead of `bulk`.
        var urgent: [Job] = []
        /// The whole-file fills' spans, in file order.
        var bulk: [Job] = []
        var files: [String: FileState] = [:]
    }

    private let queues = Mutex(Queues())
    private let pool: WorkerPool
    private let run: @Sendable (Job) -> Void
    /// Most touched-block jobs waiting at once; more are dropped (a later read asks again).
    private let maxUrgent: Int
    /// Blocks per whole-file span (one ranged download each).
    private let spanBlocks: Int

    init(threads: Int, spanBlocks: Int, run: @escaping @Sendable (Job) -> Void) {
        pool = WorkerPool(name: "dbxfs-fill", threads: threads)
        maxUrgent = 4 * max(1, threads)
        self.spanBlocks = max(1, spanBlocks)
        self.run = run
    }

    /// Distinct blocks random reads must have touched before the rest of a file of `blockCount`
    /// blocks is fetched: a sixty-fourth of it, at least 4 (a few looks into a big file, such as
    /// a header and an index page, fetch nothing more than their blocks). Early, because the fill
    /// only helps readers if it is ahead of them: 4 readers of a 1 GiB file touch 4 blocks in
    /// their first round trip.
    static func touchesBeforeWholeFile(blockCount: UInt64) -> Int { max(4, Int(blockCount / 64)) }

    /// A random read of `file` touched block `index` and waited a long round trip: complete that
    /// block, and when `wholeFile` allows and enough blocks were touched, queue the rest of the
    /// file. Returns whether this call queued the rest of the file (for the log).
    @discardableResult
    func touched(_ index: UInt64, of file: File, epoch: Int, wholeFile: Bool) -> Bool {
        let (queued, queuedWholeFile) = queues.withLock { queues -> (Int, Bool) in
            var state = queues.files[file.fileID] ?? FileState()
            defer { queues.files[file.fileID] = state }
            let stopped = state.stopped
            let stillWanted: @Sendable () -> Bool = { !stopped.flag.load(ordering: .relaxed) }
            var queued = 0
            state.touched.insert(index)
            if !state.requested.contains(index), queues.urgent.count < maxUrgent {
                state.requested.insert(index)
                queues.urgent.append(Job(blocks: [file.block(index)], epoch: epoch, stillWanted: stillWanted))
                queued += 1
            }
            guard wholeFile, !state.wholeFileQueued,
                  state.touched.count >= Self.touchesBeforeWholeFile(blockCount: file.blockCount) else { return (queued, false) }
            state.wholeFileQueued = true
            let span = UInt64(spanBlocks)
            for start in stride(from: UInt64(0), to: file.blockCount, by: Int(span)) {
                let blocks = (start..<min(start + span, file.blockCount)).map(file.block)
                queues.bulk.append(Job(blocks: blocks, epoch: epoch, stillWanted: stillWanted))
                queued += 1
            }
            return (queued, true)
        }
        for _ in 0..<queued { pool.submit { [self] in runNext() } }
        return queuedWholeFile
    }

    /// The file's readers are gone (its last handle closed): drop its queued jobs, stop its
    /// running ones. A later random read starts over.
    func stop(fileID: String) {
        queues.withLock { queues in
            guard let state = queues.files.removeValue(forKey: fileID) else { return }
            state.stopped.flag.store(true, ordering: .relaxed)
            queues.urgent.removeAll { $0.blocks.first?.key.fileID == fileID }
            queues.bulk.removeAll { $0.blocks.first?.key.fileID == fileID }
        }
    }

    /// The files whose random readers have had blocks fetched in the background and are still
    /// there (tests).
    var fileIDs: [String] { queues.withLock { Array($0.files.keys) } }

    func waitUntilIdle() { pool.waitUntilIdle() }

    func shutdown() {
        queues.withLock { queues in
            for state in queues.files.values { state.stopped.flag.store(true, ordering: .relaxed) }
            queues = Queues()
        }
        pool.stop(dropQueued: true)
    }

    /// One pool job: the most urgent job queued now. One is submitted per job queued, so each job
    /// gets a turn; a stopped file's jobs were removed and leave their turns empty.
    private func runNext() {
        let job: Job? = queues.withLock { queues in
            if !queues.urgent.isEmpty { return queues.urgent.removeFirst() }
            if !queues.bulk.isEmpty { return queues.bulk.removeFirst() }
            return nil
        }
        if let job, job.stillWanted() { run(job) }
    }
}
