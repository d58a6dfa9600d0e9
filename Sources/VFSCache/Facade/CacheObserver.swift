/// `CacheObserver`: how the block caches report what they do, for whoever counts it (the mount's
/// metrics): where each block a reader asked for came from, each block downloaded, and each
/// block evicted to stay within a budget. The cache layer knows nothing of what is done with it.
///
/// Called on reader, read-ahead and disk-writer threads, sometimes with a cache's lock held: an
/// observer must be cheap (a few atomic adds) and must never call back into the cache.
public protocol CacheObserver: Sendable {
    /// A block was found in `tier` instead of being downloaded: in memory when a reader asked for
    /// it, or on disk when a reader or read-ahead needed it.
    func blockHit(in tier: CacheTier)
    /// A block was downloaded (for a reader or for read-ahead): the cache did not have it.
    func blockDownloaded()
    /// `count` blocks were dropped from `tier` to keep it within its budget.
    func blocksEvicted(_ count: Int, from tier: CacheTier)
}

public enum CacheTier: Sendable, Equatable {
    case memory, disk
}
