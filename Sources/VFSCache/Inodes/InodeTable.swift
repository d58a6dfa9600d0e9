/// `InodeTable`: the node tree and the FUSE inode protocol. It hands out inode numbers (1 is the
/// root, numbers are never reused), keeps each node's lookup count, and decides when a node may
/// be dropped: only once it is both out of the tree and forgotten by the kernel.
///
/// A plain value type with no lock: `MetadataCache` owns the only instance and touches it with
/// its lock held. Every operation is O(1) or O(path depth), except detaching a folder (O(subtree))
/// and `sweep` (O(children) or O(nodes)), which listings need anyway.
import Foundation

struct InodeTable {
    // Internal (not private) so the write side (InodeTable+Write.swift) can add local nodes.
    var nodes = NodeStorage()
    /// Side tables, so `Node` stays small (see NodeStorage.swift); entries go with their node.
    /// When each folder alone was last listed completely (absent: never).
    private var listedAt: [InodeNumber: Double] = [:]
    /// Per folder: names confirmed absent by a metadata call, with the time of the answer.
    private var negatives: [InodeNumber: [String: Double]] = [:]
    /// When a metadata call last confirmed a node on its own (outside any listing).
    private var confirmedAt: [InodeNumber: Double] = [:]
    /// Rev the kernel last opened a file at (for keep_cache).
    private var openedRevs: [InodeNumber: String] = [:]
    var nextIno: InodeNumber = rootInode + 1
    /// Bumped by every complete listing, for mark-and-sweep.
    private var currentGeneration: UInt64 = 0

    init() {
        nodes[rootInode] = Node(ino: rootInode, parent: 0, name: "", kind: .directory, id: nil)
    }

    subscript(ino: InodeNumber) -> Node? { nodes[ino] }

    var count: Int { nodes.count }

    mutating func newGeneration() -> UInt64 {
        currentGeneration += 1
        return currentGeneration
    }

    func child(of parent: InodeNumber, key: String) -> InodeNumber? { nodes[parent]?.children[key] }

    /// The key a name is filed under: its lowercase form. Lookups from the kernel and entries
    /// from Dropbox both go through this one function, so matching never depends on Dropbox's
    /// own lowercasing (`path_lower`) agreeing with ours.
    static func key(_ name: some StringProtocol) -> String { name.lowercased() }

    /// The node at a path relative to the mount root, in any case ("" is the root).
    func resolve(path: String) -> InodeNumber? {
        var ino = rootInode
        for component in path.split(separator: "/", omittingEmptySubsequences: true) {
            guard let next = nodes[ino]?.children[Self.key(component)] else { return nil }
            ino = next
        }
        return ino
    }

    /// Display-case path relative to the mount root ("" for the root), or nil once detached.
    func path(of ino: InodeNumber) -> String? {
        var components: [String] = []
        var current = ino
        while current != rootInode {
            guard let node = nodes[current], node.parent != 0 else { return nil }
            components.append(node.name)
            current = node.parent
        }
        return components.reversed().reduce(into: "") { $0 += "/" + $1 }
    }

    /// Inserts or updates the child `entry` of `parent`, keeping its inode when the kind is unchanged.
    @discardableResult
    mutating func upsert(_ entry: RemoteEntry, under parent: InodeNumber, generation: UInt64) -> InodeNumber? {
        guard let parentNode = nodes[parent], parentNode.isDirectory else { return nil }
        let key = Self.key(entry.name)
        let kind = Node.Kind(entry)
        let flags = Self.flags(of: entry, inFolder: parentNode)
        if let existing = nodes[parent]?.children[key] {
            if var node = nodes[existing], node.local == .dirty {
                // Local bytes win until their commit event: keep our size and times.
                node.name = entry.name
                node.flags = flags
                if !entry.isFolder { node.id = entry.id }
                node.generation = max(node.generation, generation)
                nodes[existing] = node
                return existing
            }
            if var node = nodes[existing], node.isDirectory == entry.isFolder {
                node.name = entry.name
                node.kind = kind
                node.flags = flags
                node.id = entry.id
                // Never lower it: a lookup racing a listing must not get its entry swept.
                node.generation = max(node.generation, generation)
                nodes[existing] = node
                return existing
            }
            detach(existing)
        }
        let ino = nextIno
        nextIno += 1
        var node = Node(ino: ino, parent: parent, name: entry.name, kind: kind, id: entry.id)
        node.flags = flags
        node.generation = generation
        nodes[ino] = node
        nodes[parent]!.children[key] = ino
        clearNegative(key, in: parent)
        return ino
    }

    /// An entry's flags as its node keeps them: an entry without sharing_info inside a read-only
    /// folder is read-only too (files.stone: read_only means "inside a read-only shared folder").
    static func flags(of entry: RemoteEntry, inFolder folder: Node) -> RemoteEntry.Flags {
        var flags = entry.flags
        if !flags.contains(.shared), folder.flags.contains(.readOnly) { flags.insert(.readOnly) }
        return flags
    }

    /// Applies an entry from a recursive listing or a change feed, where only the path says
    /// where it belongs. Missing parent folders are created (children may come before their
    /// parent: InodeTable+Parents.swift); nil when a file is in the way.
    @discardableResult
    mutating func apply(_ change: RemoteChange, generation: UInt64) -> InodeNumber? {
        switch change {
        case .upsert(let entry):
            // path_display: only its last component's case is reliable, and case does not matter here.
            var created: [(parent: InodeNumber, name: String)] = []
            guard !entry.pathDisplay.isEmpty,
                  let parent = folderCreatingMissing(path: Self.parentPath(entry.pathDisplay), generation: generation,
                                                     created: &created) else { return nil }
            return upsert(entry, under: parent, generation: generation)
        case .deleted(_, let pathDisplay):
            guard !pathDisplay.isEmpty, let ino = resolve(path: pathDisplay) else { return nil }
            // A file with local changes stays: its upload will bring it back.
            guard nodes[ino]?.local != .dirty else { return nil }
            detach(ino)
            return nil
        }
    }

    /// Removes the node (and its subtree) from the tree. Nodes the kernel still references stay
    /// as orphans until `forget`; the others are dropped now.
    mutating func detach(_ ino: InodeNumber) {
        guard ino != rootInode, let node = nodes[ino] else { return }
        if node.parent != 0 { nodes[node.parent]?.children[node.key] = nil }
        var stack = [ino]
        while let current = stack.popLast() {
            guard var item = nodes[current] else { continue }
            stack.append(contentsOf: item.children.values)
            if item.lookupCount == 0 {
                remove(current)
            } else {
                item.parent = 0
                item.children = [:]
                listedAt[current] = nil
                negatives[current] = nil
                nodes[current] = item
            }
        }
    }

    /// Detaches the server-mirroring children of `parent` not confirmed by `generation`, except
    /// `sparing` (what the mount changed itself since the listing started).
    mutating func sweepChildren(of parent: InodeNumber, olderThan generation: UInt64, sparing: Set<InodeNumber> = []) {
        guard let children = nodes[parent]?.children else { return }
        for ino in children.values where !sparing.contains(ino) {
            if let node = nodes[ino], node.generation < generation, node.local == .remote { detach(ino) }
        }
    }

    /// Detaches every server-mirroring node in the tree not confirmed by `generation`, except `sparing`.
    mutating func sweepAll(olderThan generation: UInt64, sparing: Set<InodeNumber> = []) {
        let stale = nodes.values.filter {
            $0.ino != rootInode && $0.isAttached && $0.generation < generation && $0.local == .remote && !sparing.contains($0.ino)
        }
        for node in stale { detach(node.ino) }
    }

    /// Detaches `ino` and what is under it that mirrors the server and was not confirmed by
    /// `generation`, except `sparing`, and except nodes with local bytes and the folders on the
    /// way to them (their uploads bring those folders back to Dropbox).
    mutating func sweepSubtree(_ ino: InodeNumber, olderThan generation: UInt64, sparing: Set<InodeNumber> = []) {
        func keepsLocalBytes(_ current: InodeNumber) -> Bool {
            guard let node = nodes[current] else { return false }
            if node.local != .remote { return true }
            return node.children.values.contains(where: keepsLocalBytes)
        }
        var stack = [ino]
        while let current = stack.popLast() {
            guard let node = nodes[current], node.isAttached else { continue }
            if !sparing.contains(current), node.local == .remote, node.generation < generation, !keepsLocalBytes(current) {
                detach(current)
            } else {
                stack.append(contentsOf: node.children.values)
            }
        }
    }

    /// The nodes at or under the changed paths that exist now (what a sweep must spare).
    func subtrees(_ changed: ChangedPaths) -> Set<InodeNumber> {
        var result = Set<InodeNumber>()
        for key in changed.keys {
            guard let ino = resolve(path: key) else { continue }
            var stack = [ino]
            while let current = stack.popLast() {
                result.insert(current)
                stack.append(contentsOf: nodes[current]?.children.values.map { $0 } ?? [])
            }
        }
        return result
    }

    /// When the folder alone was last listed completely (nil: never).
    func listedAt(_ ino: InodeNumber) -> Double? { listedAt[ino] }
    /// When a metadata call confirmed `key` absent from `parent` (nil: it did not).
    func negative(_ key: String, in parent: InodeNumber) -> Double? { negatives[parent]?[key] }
    func confirmedAt(_ ino: InodeNumber) -> Double? { confirmedAt[ino] }
    func lastOpenedRev(_ ino: InodeNumber) -> String? { openedRevs[ino] }

    mutating func setListed(_ ino: InodeNumber, at time: Double) {
        guard nodes[ino]?.isDirectory == true else { return }
        listedAt[ino] = time
        negatives[ino] = nil
    }

    mutating func setAllListed(at time: Double) {
        for (ino, node) in nodes where node.isDirectory && node.isAttached { listedAt[ino] = time }
        negatives = [:]
    }

    mutating func setNegative(_ key: String, in parent: InodeNumber, at time: Double) {
        guard nodes[parent]?.isDirectory == true else { return }
        negatives[parent, default: [:]][key] = time
    }

    mutating func clearNegative(_ key: String, in parent: InodeNumber) {
        negatives[parent]?[key] = nil
    }

    mutating func setConfirmed(_ ino: InodeNumber, at time: Double) {
        guard nodes[ino] != nil else { return }
        confirmedAt[ino] = time
    }

    mutating func setLastOpenedRev(_ ino: InodeNumber, _ rev: String?) {
        guard nodes[ino] != nil else { return }
        openedRevs[ino] = rev
    }

    /// Drops the node and its side-table entries.
    private mutating func remove(_ ino: InodeNumber) {
        nodes[ino] = nil
        listedAt[ino] = nil
        negatives[ino] = nil
        confirmedAt[ino] = nil
        openedRevs[ino] = nil
    }

    // MARK: Lookup counts

    mutating func addLookup(_ ino: InodeNumber) {
        nodes[ino]?.lookupCount += 1
    }

    /// Subtracts `count` (never below zero); drops the node if it is orphaned and unreferenced.
    mutating func forget(_ ino: InodeNumber, count: UInt64) {
        guard ino != rootInode, var node = nodes[ino] else { return }
        node.lookupCount -= min(count, node.lookupCount)
        if node.lookupCount == 0 && !node.isAttached {
            remove(ino)
        } else {
            nodes[ino] = node
        }
    }

    // MARK: Paths

    static func parentPath(_ path: String) -> String {
        guard let slash = path.lastIndex(of: "/") else { return "" }
        return String(path[..<slash])
    }

    /// The last name of `path` ("" for the root).
    static func lastName(_ path: String) -> String {
        String(path.split(separator: "/").last ?? "")
    }
}
