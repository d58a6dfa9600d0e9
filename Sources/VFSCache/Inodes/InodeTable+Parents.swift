/// Entries whose parent folder has not arrived yet. Dropbox lists children before their parent
/// at times, mostly with shared folders (samschott/maestral#452, fixed in PR #472), and its
/// list_folder documentation tells clients to create missing parent folders. So a recursive
/// listing or a change feed entry for `/a/b/c.txt` creates `a` and `b` when they are unknown, as
/// folders named the way the entry's path spells them, with no id; when their own entries come,
/// `upsert` finds them by name and fills in the id and the display case.
extension InodeTable {
    /// The folder at `path` (relative to the mount root, any case), creating the missing folders
    /// on the way; each one made is appended to `created` (for the kernel's invalidations). nil
    /// when something on the way is a file (an entry we cannot place: the caller drops it).
    mutating func folderCreatingMissing(path: String, generation: UInt64,
                                        created: inout [(parent: InodeNumber, name: String)]) -> InodeNumber? {
        var ino = rootInode
        for component in path.split(separator: "/", omittingEmptySubsequences: true) {
            guard let node = nodes[ino], node.isDirectory else { return nil }
            let key = Self.key(component)
            if let next = node.children[key] {
                ino = next
                continue
            }
            let child = nextIno
            nextIno += 1
            var folder = Node(ino: child, parent: ino, name: String(component), kind: .directory, id: nil)
            folder.generation = generation
            nodes[child] = folder
            nodes[ino]!.children[key] = child
            clearNegative(key, in: ino)
            created.append((ino, String(component)))
            ino = child
        }
        return nodes[ino]?.isDirectory == true ? ino : nil
    }
}
