/// `LRUIndex`: recency order and byte sizes of cached items, with O(1) insert, touch, remove and
/// evict-oldest (a hash map over a doubly linked list). Both block caches use it for their
/// budgets; it holds no data itself and has no lock (its owner's lock covers it).
struct LRUIndex<Key: Hashable> {
    private final class Entry {
        let key: Key
        var size: Int
        var older: Entry?
        unowned(unsafe) var newer: Entry?
        init(key: Key, size: Int) { self.key = key; self.size = size }
    }

    private var entries: [Key: Entry] = [:]
    /// Most recently used end; `older` links run toward `oldest`.
    private var newest: Entry?
    private var oldest: Entry?
    private(set) var totalSize = 0

    var count: Int { entries.count }

    func contains(_ key: Key) -> Bool { entries[key] != nil }

    /// Adds the key as the most recent (or updates its size and recency).
    mutating func insert(_ key: Key, size: Int) {
        if let entry = entries[key] {
            totalSize += size - entry.size
            entry.size = size
            moveToNewest(entry)
            return
        }
        let entry = Entry(key: key, size: size)
        entries[key] = entry
        totalSize += size
        linkAsNewest(entry)
    }

    /// Every key, in no particular order (O(n): for rare bulk moves such as pinning).
    var keys: [Key] { Array(entries.keys) }

    /// Adds the key as the least recent, so it is the first to go (a block just unpinned).
    mutating func insertAsOldest(_ key: Key, size: Int) {
        remove(key)
        let entry = Entry(key: key, size: size)
        entries[key] = entry
        totalSize += size
        entry.newer = oldest
        oldest?.older = entry
        oldest = entry
        if newest == nil { newest = entry }
    }

    /// Marks the key as just used; false if absent.
    @discardableResult
    mutating func touch(_ key: Key) -> Bool {
        guard let entry = entries[key] else { return false }
        moveToNewest(entry)
        return true
    }

    @discardableResult
    mutating func remove(_ key: Key) -> Int? {
        guard let entry = entries.removeValue(forKey: key) else { return nil }
        unlink(entry)
        totalSize -= entry.size
        return entry.size
    }

    /// Removes and returns the least recently used key.
    mutating func popOldest() -> (key: Key, size: Int)? {
        guard let entry = oldest else { return nil }
        remove(entry.key)
        return (entry.key, entry.size)
    }

    private mutating func moveToNewest(_ entry: Entry) {
        guard newest !== entry else { return }
        unlink(entry)
        linkAsNewest(entry)
    }

    private mutating func linkAsNewest(_ entry: Entry) {
        entry.older = newest
        entry.newer = nil
        newest?.newer = entry
        newest = entry
        if oldest == nil { oldest = entry }
    }

    private mutating func unlink(_ entry: Entry) {
        let older = entry.older
        let newer = entry.newer
        if let newer { newer.older = older } else { newest = older }
        if let older { older.newer = newer } else { oldest = newer }
        entry.older = nil
        entry.newer = nil
    }
}
