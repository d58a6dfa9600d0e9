/// `MemoryBlockCache`: recently used blocks and fragments in RAM, evicted least-recently-used
/// first once their bytes pass the budget. Blocks are immutable `CachedBlock`s shared by
/// reference, so a hit costs no copy until the read copies its slice into the reply. Only whole
/// blocks and whole fragments enter it; a block that arrives drops the fragments of it that random
/// readers fetched before (they hold the same bytes).
import Foundation

final class MemoryBlockCache: @unchecked Sendable {
    // @unchecked: `blocks`, `order` and `fragments` are only touched with `lock` held.
    private let lock = NSLock()
    private var blocks: [BlockKey: CachedBlock] = [:]
    private var order = LRUIndex<BlockKey>()
    /// The fragments held of each block (keyed by the block's own key).
    private var fragments: [BlockKey: Set<UInt16>] = [:]
    let budget: Int
    private let observer: (any CacheObserver)?

    init(budget: Int, observer: (any CacheObserver)? = nil) { self.budget = budget; self.observer = observer }

    func get(_ key: BlockKey) -> CachedBlock? {
        lock.lock(); defer { lock.unlock() }
        guard let block = blocks[key] else { return nil }
        order.touch(key)
        return block
    }

    func contains(_ key: BlockKey) -> Bool {
        lock.lock(); defer { lock.unlock() }
        return blocks[key] != nil
    }

    /// Caches the block, evicting the oldest until the total fits. A block larger than the whole
    /// budget is not cached.
    func put(_ key: BlockKey, _ block: CachedBlock) {
        guard block.count <= budget, block.isWhole else { return }
        lock.lock(); defer { lock.unlock() }
        blocks[key] = block
        order.insert(key, size: block.count)
        if key.isWholeBlock {
            for part in fragments.removeValue(forKey: key) ?? [] { removeLocked(key.fragment(Int(part))) }
        } else {
            fragments[key.wholeBlock, default: []].insert(key.part)
        }
        var evicted = 0
        while order.totalSize > budget, let victim = order.popOldest() {
            blocks[victim.key] = nil
            forgetFragmentLocked(victim.key)
            evicted += 1
        }
        if evicted > 0 { observer?.blocksEvicted(evicted, from: .memory) }
    }

    /// Drops one block (a sequential reader has gone past it).
    func remove(_ key: BlockKey) {
        lock.lock(); defer { lock.unlock() }
        removeLocked(key)
        forgetFragmentLocked(key)
    }

    /// Drops the fragments held of block `key` (its whole block is cached elsewhere now).
    func dropFragments(of key: BlockKey) {
        lock.lock(); defer { lock.unlock() }
        for part in fragments.removeValue(forKey: key.wholeBlock) ?? [] { removeLocked(key.wholeBlock.fragment(Int(part))) }
    }

    /// Drops every block and fragment of one revision of a file.
    func purge(fileID: String, rev: String) {
        lock.lock(); defer { lock.unlock() }
        for key in blocks.keys where key.fileID == fileID && key.rev == rev {
            blocks[key] = nil
            order.remove(key)
            forgetFragmentLocked(key)
        }
    }

    var usage: (bytes: Int, blocks: Int) {
        lock.lock(); defer { lock.unlock() }
        return (order.totalSize, order.count)
    }

    private func removeLocked(_ key: BlockKey) {
        guard blocks.removeValue(forKey: key) != nil else { return }
        order.remove(key)
    }

    private func forgetFragmentLocked(_ key: BlockKey) {
        guard !key.isWholeBlock else { return }
        let block = key.wholeBlock
        fragments[block]?.remove(key.part)
        if fragments[block]?.isEmpty == true { fragments[block] = nil }
    }
}
