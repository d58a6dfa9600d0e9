/// `VFSConfig`: every tunable of the cache layer in one value, with the defaults a mount uses when
/// the command line says nothing. The reasoning and measurements behind each default are in
/// docs/VFSCACHE.md; the CLI maps its options (`-o uid=,gid=,umask=`, `--cache-dir`,
/// `--cache-size`) onto these fields.
import Foundation

public struct VFSConfig: Sendable {
    // MARK: Ownership and modes

    /// Owner reported for every file and folder (the mounting user by default).
    public var uid: UInt32
    public var gid: UInt32
    /// Applied to 0o666 for files and 0o777 for folders: 0o022 gives 0644 / 0755.
    public var umask: UInt16 = 0o022

    public var filePermissions: UInt16 { 0o666 & ~umask & 0o7777 }
    public var directoryPermissions: UInt16 { 0o777 & ~umask & 0o7777 }

    // MARK: Metadata

    /// Seconds the kernel may cache a name → inode mapping (FUSE entry_timeout).
    public var entryTimeout: Double = 1
    /// Seconds the kernel may cache attributes (FUSE attr_timeout).
    public var attributeTimeout: Double = 1
    /// Seconds a folder listing is trusted before it is refreshed (one delta call when the whole
    /// tree was prefetched, else one listing of that folder).
    public var directoryTTL: Double = 30
    /// Seconds a name's absence is trusted. Past this, a missing name in a listing older than
    /// this is confirmed with one metadata call, and that answer is cached again for this long.
    public var negativeTTL: Double = 10
    /// Page size asked of list_folder (Dropbox accepts 1...2000).
    public var listPageSize: Int = 2000
    /// On first access, the whole tree under the mount root is listed recursively unless it holds
    /// more entries than this; 0 disables the recursive prefetch (per-folder listing only).
    public var recursivePrefetchMaxEntries: Int = 25_000
    /// While that recursive listing runs (in the background), this many folder accesses are
    /// answered by listing the folder on its own (one call each) instead of waiting for it: the
    /// first access after a cold mount, and a path a few folders deep, then cost about one round
    /// trip each whatever the account's size. Later accesses wait for the whole tree. 16 covers a
    /// path as deep as people keep files, and bounds what a `find` started meanwhile adds to the
    /// recursive listing's calls.
    public var eagerListingsWhilePrefetching: Int = 16
    /// Modification time reported for folders (Dropbox keeps none).
    public var mountTime: Date = Date()

    // MARK: Data

    /// Directory for the on-disk block cache (nil: memory only).
    public var cacheDirectory: URL?
    /// Byte budget of the in-memory block cache. Keep it at least twice `readAheadMaxBytes`.
    public var memoryCacheBytes: Int = 256 << 20
    /// Byte budget of the on-disk block cache.
    public var diskCacheBytes: Int64 = 10 << 30
    /// Unit of download and caching. Changing it starts a fresh disk cache (blocks are keyed by it).
    public var blockSize: Int = 4 << 20
    /// Largest read-ahead window; it starts at two blocks and doubles while reads stay sequential.
    public var readAheadMaxBytes: Int = 128 << 20
    /// Block buffers mapped and populated when the mount starts, so a cold file's first read does
    /// not wait for fresh memory (BlockBufferPool.prefill): 8 MiB resident from the start.
    public var prefilledBlockBuffers: Int = 2
    /// Threads (and so parallel ranged downloads) used for read-ahead.
    public var readAheadParallelism: Int = 16
    /// Read-ahead fetches up to this many consecutive blocks (aligned groups) with one ranged
    /// download instead of one request per block.
    public var readAheadSpanBlocks: Int = 4
    /// Sequential bytes a handle must read before read-ahead starts (a read at offset 0 counts).
    public var prefetchThreshold: Int = 256 << 10
    /// What a random read fetches: aligned fragments of this many bytes (more of them at once the
    /// longer the reader stays sequential) instead of the whole block. Must divide `blockSize`;
    /// 0, or `blockSize` or more, fetches whole blocks only.
    public var fragmentBytes: Int = 128 << 10
    /// Round trip (seconds, the fastest recent fragment downloads) above which a random read's
    /// block is also fetched whole in the background, so later reads in it cost no round trip
    /// (and small enough files are filled: `fillFilesReadAtRandomUpTo`). 0: always; `.infinity`:
    /// never.
    public var completeBlocksAfterRoundTrip: Double = 0.010
    /// Byte budget of the memory for random readers' bytes (fragments, and pieces of blocks read
    /// back from the disk cache), apart from `memoryCacheBytes`, which holds sequential readers'
    /// read-ahead: random reads of a big file do not grow the daemon's memory past it.
    public var randomReadMemoryBytes: Int = 16 << 20
    /// Files of at most this many bytes (and at most a quarter of `diskCacheBytes`) that are read
    /// at random at long round trips (see `fillFilesAfterRoundTrip`), in enough places (a
    /// sixty-fourth of their blocks, at least 4), are fetched whole in the background into the
    /// disk cache, until their last handle is closed (docs/VFSCACHE.md). 0: never.
    public var fillFilesReadAtRandomUpTo: Int64 = 2 << 30
    /// The fill needs firmer evidence of a far server than a block's completion: at least this
    /// many fragment downloads timed (each reader's first one includes a connection's
    /// handshakes), and a round-trip estimate of at least `fillFilesAfterRoundTrip` seconds
    /// (a loaded CPU's waits alone pass 10 ms on loopback).
    public var fillAfterFragmentDownloads: Int = 16
    public var fillFilesAfterRoundTrip: Double = 0.015
    /// Parallel ranged downloads (and connections) of that background fill, and of the blocks
    /// random reads touched at long round trips.
    public var backgroundFillParallelism: Int = 16
    /// Check whole-file sequential reads against Dropbox's content_hash.
    public var verifyContentHash: Bool = true
    /// Longest a read waits for a block another thread is fetching, before EIO. The remote
    /// adapter's own retry budget should end well before this.
    public var readTimeout: Double = 120
    /// Bytes of finished blocks allowed to wait for the disk writer; past this, blocks are not
    /// written to disk (the cache is best effort, the reader never waits for it).
    public var diskWriteQueueBytes: Int = 128 << 20
    /// After a whole-file read whose content hash matched, keep the file whole in the disk cache
    /// too (`DiskBlockCache.storeWholeFile`), and offer it in `OpenReply.backingFile`: the FUSE
    /// glue then lets the kernel read it directly (passthrough). Off unless the glue can use it.
    public var keepWholeFiles: Bool = false
    /// Offer a writer's staging file in `OpenReply.backingFile` when it can be prepared without
    /// the network (O_TRUNC, a new or empty file, or bytes already staged), so the glue lets the
    /// kernel write it directly (passthrough; docs/WRITEBACK.md "Passthrough writes"). Off unless
    /// the glue can use it.
    public var passthroughWrites: Bool = false
    /// No writer is offered passthrough while more than this many bytes wait for their upload:
    /// the writer then goes through the daemon, whose writes wait for the uploads meanwhile
    /// (`--staging-budget`, WriteBack/StagingBudget.swift).
    public var stagingBudget: UInt64 = 4 << 30
    /// A writer through the daemon waits while more than `stagingBudget` bytes wait for their
    /// upload, but no longer than this many seconds without an upload byte moving
    /// (WriteBack/StagingBudget.swift).
    public var stagingStallLimit: Double = 5

    // MARK: Writing

    /// A folder rename involving more files and folders than this (as far as the tree knows) is
    /// refused with EXDEV, so `mv` copies and removes: Dropbox refuses such a move
    /// (`too_many_files`, files.stone RelocationError: "more than 10,000 files and folders").
    public var maxMoveEntries: Int = 10_000

    // MARK: Misc

    /// Told of cache hits, downloads and evictions (CacheObserver.swift); nil: nobody.
    public var observer: (any CacheObserver)?

    /// Seconds a space-usage answer is reused for statfs.
    public var statfsTTL: Double = 60

    public init(uid: UInt32 = getuid(), gid: UInt32 = getgid()) {
        self.uid = uid
        self.gid = gid
    }
}
