/// `NodeStorage`: where `InodeTable` keeps its nodes: a dense array of nodes plus a small
/// inode → slot map, with freed slots reused. It has the dictionary interface the table used
/// (`storage[ino]` to read, assign, mutate in place or remove; iteration as (key, value)).
///
/// Why not `[InodeNumber: Node]`: a Swift dictionary keeps between 37% and 75% of its buckets
/// full, and every bucket is as wide as a whole `Node` (~200 bytes), so the table alone cost 270–540
/// bytes per node. Here only the map's buckets (16 bytes) carry that slack, and the array grows
/// by doubling, so the nodes themselves cost 1–2 times their size. Measured at 1,000,000 entries in
/// scripts/bench-changes (docs/BENCHMARKS.md). Inode numbers are still never reused; only slots are.
struct NodeStorage: Sequence {
    private var slots: [InodeNumber: UInt32] = [:]
    private var storage: ContiguousArray<Node?> = []
    private var freeSlots: [UInt32] = []

    var count: Int { slots.count }

    subscript(ino: InodeNumber) -> Node? {
        get {
            guard let slot = slots[ino] else { return nil }
            return storage[Int(slot)]
        }
        _modify {
            if let slot = slots[ino] {
                // In place: a folder's children dictionary is mutated without a copy.
                yield &storage[Int(slot)]
                if storage[Int(slot)] == nil {
                    slots[ino] = nil
                    freeSlots.append(slot)
                }
            } else {
                var added: Node? = nil
                yield &added
                if let added { insert(ino, added) }
            }
        }
    }

    private mutating func insert(_ ino: InodeNumber, _ node: Node) {
        if let slot = freeSlots.popLast() {
            storage[Int(slot)] = node
            slots[ino] = slot
        } else {
            precondition(storage.count < Int(UInt32.max), "more than 4 billion cached nodes")
            slots[ino] = UInt32(storage.count)
            storage.append(node)
        }
    }

    /// Every node, in no particular order.
    var values: Values { Values(storage: storage) }

    struct Values: Sequence {
        fileprivate let storage: ContiguousArray<Node?>
        func makeIterator() -> some IteratorProtocol<Node> { storage.lazy.compactMap { $0 }.makeIterator() }
    }

    func makeIterator() -> some IteratorProtocol<(key: InodeNumber, value: Node)> {
        storage.lazy.compactMap { node in node.map { (key: $0.ino, value: $0) } }.makeIterator()
    }
}
