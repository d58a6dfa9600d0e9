/// `WriteBackConfiguration`: the write-back engine's tunables, with the defaults docs/WRITEBACK.md
/// explains. Tests shrink the delays and thresholds; the daemon uses the defaults.
import Foundation

public struct WriteBackConfiguration: Sendable {
    /// Files at least this big go through a concurrent upload session with several chunks in
    /// flight; smaller ones go as one `upload` call (alone) or join a `finishBatch` (in a burst).
    public var largeFileThreshold: UInt64 = 8 << 20
    /// Bytes per append in a concurrent session; must be a multiple of 4 MiB (Dropbox's rule).
    /// 16 MiB: a 1 GiB cp + sync took a median 1.80 s against 1.98 s with 8 MiB (half the
    /// requests, each with its own headers, JSON and server bookkeeping; docs/BENCHMARKS.md).
    public var chunkSize: UInt64 = 16 << 20
    /// Appends in flight at once per large upload. Dropbox caps each connection, so this is what
    /// fills a WAN link: at 50 ms and 25 MB/s per connection a 1 GiB `cp` + upload went from
    /// 73 MB/s with 4 to 118–123 MB/s with 8 (docs/WRITEBACK.md).
    public var chunksInFlight = 8
    /// Threads running small uploads, session uploads of batched files, commits and large-upload
    /// coordinators. Each small file of a burst costs one upload_session/start round trip before
    /// the batch commit: at 50 ms, `tar x` of 1000 files took 16.8 s with 4, 5.4 s with 16.
    public var uploadThreads = 16
    /// Large uploads in progress at once (each one keeps `chunksInFlight` busy on its own).
    public var maxConcurrentLargeUploads = 2
    /// A burst of small files is gathered until no new one arrived for this long...
    public var gatherDelay: TimeInterval = 0.15
    /// ...or the gathering has lasted this long, or it holds `maxBatchEntries` files.
    public var maxGatherTime: TimeInterval = 5
    /// Entries per `finishBatch` call (Dropbox allows at most 1000).
    public var maxBatchEntries = 1000
    /// Backoff after a transient failure: base × 2^(attempt-1), capped, with ±25 % jitter.
    public var retryBaseDelay: TimeInterval = 0.5
    public var retryMaxDelay: TimeInterval = 30
    /// Retry delay after a failure that needs time or a person (insufficient space, refused name).
    public var hardFailureRetryDelay: TimeInterval = 60
    /// Namespace operations (mkdir, unlink, rmdir, rename) are gathered into one batch until none
    /// came for this long (`rm -rf` and `tar x` issue them back to back; `tar x` makes a folder
    /// every few tens of milliseconds, its files in between: 20 ms sent 92 batches for 101 folders)...
    public var namespaceGatherDelay: TimeInterval = 0.15
    /// ...or for this long in all (unless someone waits: `dbxfs sync`, unmount).
    public var namespaceMaxGather: TimeInterval = 1
    /// Entries per namespace batch (Dropbox takes at most 1000 per delete_batch and move_batch_v2).
    public var maxNamespaceBatch = 1000
    /// Operations read back from the journal at start wait for `releaseRecoveredNamespaceOperations`
    /// (the facade shows them on the mount first, so their outcome cannot reach it before they do).
    public var holdRecoveredNamespaceOperations = false
    /// Keep the staging file of a commit whose bytes are exactly the new revision's at
    /// `StagingArea.committedBytes(generation:)` instead of deleting it, for the facade to adopt
    /// into its disk cache (docs/WRITEBACK.md step 4). The VFS sets it when it has a disk cache.
    public var handOverCommittedBytes = false
    /// A staging file the kernel writes by itself (passthrough writes) has its disk writeback
    /// started each time it grew by this many bytes (0: never), checked every
    /// `kernelWritebackInterval` seconds, so the close's fdatasync only waits for the tail
    /// (StagingWriteback.swift).
    public var kernelWritebackThreshold: UInt64 = 8 << 20
    public var kernelWritebackInterval: TimeInterval = 0.05
    /// Upload a large file the kernel writes by itself while it is still written, from what has
    /// settled at each of those looks, every chunk checked against the file at close
    /// (StreamingUpload.swift, "kernel streams").
    public var streamKernelWrites = true
    /// How long bytes of such a file must have been there (the file still growing) before they are
    /// streamed: a quick writer is done before, and does not share the CPU with its upload.
    public var kernelStreamSettle: TimeInterval = 1
    /// A file the kernel writes faster than this (bytes a second) is not streamed: the writer is
    /// done soon, and its upload would only take CPU from it.
    public var kernelStreamMaxRate: UInt64 = 128 << 20
    /// Chunks of one kernel stream in flight at once (each is read into 16 MiB of memory).
    public var kernelStreamChunksInFlight = 2
    /// The clock used for conflicted-copy dates.
    public var now: @Sendable () -> Date = { Date() }
    /// The time zone of conflicted-copy dates (the local one, like the Dropbox client).
    public var timeZone: TimeZone = .current
    /// Where log lines go (nil: stderr). Conflicts and failures are warnings, resumes info.
    public var logger: Logger?

    public init() {}
}
