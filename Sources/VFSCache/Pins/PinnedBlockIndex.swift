/// `PinnedBlockIndex`: the disk cache's bookkeeping with pins (`dbxfs pin`, PinnedFiles.swift).
/// Blocks of pinned files (by Dropbox file id, so every revision of a pinned file and its
/// whole-file copy count) are kept apart from the LRU and are never evicted; they still count
/// against the one budget, so the other blocks make room for them. Unpinning a file moves its
/// blocks back as the least recently used, the first to go when room is needed.
///
/// No lock of its own: `DiskBlockCache.lock` covers it.
struct PinnedBlockIndex {
    /// Blocks that may be evicted, in LRU order.
    private var evictable = LRUIndex<BlockKey>()
    /// Blocks of pinned files: never evicted (their order does not matter).
    private var kept = LRUIndex<BlockKey>()
    private(set) var pinnedFileIDs: Set<String> = []
    let budget: Int64

    init(budget: Int64) { self.budget = budget }

    var totalSize: Int { evictable.totalSize + kept.totalSize }
    /// Bytes of pinned files' blocks on disk.
    var pinnedSize: Int { kept.totalSize }
    var count: Int { evictable.count + kept.count }

    func contains(_ key: BlockKey) -> Bool { evictable.contains(key) || kept.contains(key) }

    /// Marks the block as just used; false if absent.
    mutating func touch(_ key: BlockKey) -> Bool { evictable.touch(key) || kept.contains(key) }

    mutating func insert(_ key: BlockKey, size: Int) {
        if pinnedFileIDs.contains(key.fileID) { kept.insert(key, size: size) } else { evictable.insert(key, size: size) }
    }

    mutating func remove(_ key: BlockKey) {
        evictable.remove(key)
        kept.remove(key)
    }

    /// Makes `fileIDs` the pinned files: their blocks leave the LRU, the blocks of files no longer
    /// pinned join it as the oldest. Returns the blocks to delete to get back under the budget.
    mutating func setPinned(_ fileIDs: Set<String>) -> [BlockKey] {
        guard fileIDs != pinnedFileIDs else { return [] }
        let released = pinnedFileIDs.subtracting(fileIDs)
        pinnedFileIDs = fileIDs
        for key in evictable.keys where fileIDs.contains(key.fileID) {
            if let size = evictable.remove(key) { kept.insert(key, size: size) }
        }
        if !released.isEmpty {
            for key in kept.keys where released.contains(key.fileID) {
                if let size = kept.remove(key) { evictable.insertAsOldest(key, size: size) }
            }
        }
        return evict()
    }

    /// The least recently used unpinned block, taken out of the index (nil: none left). For room
    /// on the cache's disk, which the budget does not see (DiskBlockCache.makeRoom).
    mutating func popOldestEvictable() -> BlockKey? { evictable.popOldest()?.key }

    /// Pops the least recently used unpinned blocks while the total is over the budget. Pinned
    /// blocks are never victims: PinnedFiles refuses pins that do not fit, so they alone stay
    /// within the budget.
    mutating func evict() -> [BlockKey] {
        var victims: [BlockKey] = []
        while Int64(totalSize) > budget, let victim = evictable.popOldest() { victims.append(victim.key) }
        return victims
    }
}
