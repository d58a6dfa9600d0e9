/// The change feed while a case-only rename of ours is under way. It goes through a temporary
/// name (WriteBack/Namespace/CaseOnlyRename.swift), so the feed can show the halfway state: the item
/// deleted and a `.name.dbxfs-case-…` sibling created. Applied, that would remove the item from
/// the tree (pending uploads inside a folder included) and show the temporary name, until the
/// second move's entries put it back. So, from just before the first move until the feed shows
/// the item again (or `caseRenameEchoWindow` has passed), deletes of the item and entries named
/// like the temporary one in its folder are our own steps and are skipped.
import Foundation

/// One case-only rename whose halfway state the feed may still show.
struct PendingCaseRename {
    let folderKey: String
    let itemKey: String
    let until: Double
}

extension MetadataCache {
    /// How long after it started a case-only rename's halfway steps may still come in the feed.
    static let caseRenameEchoWindow: Double = 60

    /// Called before the first move of a case-only rename of `path` (relative to the mount root).
    func expectCaseRename(of path: String) {
        let now = clock.now()
        lock.lock()
        defer { lock.unlock() }
        caseRenames.removeAll { $0.until < now }
        caseRenames.append(PendingCaseRename(folderKey: InodeTable.key(InodeTable.parentPath(path)),
                                             itemKey: InodeTable.key(path), until: now + Self.caseRenameEchoWindow))
    }

    /// Whether `change` is a halfway step of one of our case-only renames (lock held). The item's
    /// own entry coming back ends the wait for that rename.
    func isOwnCaseRenameStep(_ change: RemoteChange) -> Bool {
        guard !caseRenames.isEmpty else { return false }
        let now = clock.now()
        caseRenames.removeAll { $0.until < now }
        switch change {
        case .upsert(let entry):
            let key = InodeTable.key(entry.pathDisplay)
            if let index = caseRenames.firstIndex(where: { $0.itemKey == key }) {
                caseRenames.remove(at: index)
                return false
            }
            return caseRenames.contains { isTemporary(key, of: $0) }
        case .deleted(_, let pathDisplay):
            let key = InodeTable.key(pathDisplay)
            return caseRenames.contains { key == $0.itemKey || key.hasPrefix($0.itemKey + "/") || isTemporary(key, of: $0) }
        }
    }

    private func isTemporary(_ key: String, of rename: PendingCaseRename) -> Bool {
        let prefix = rename.folderKey + "/"
        guard key.hasPrefix(prefix) else { return false }
        let name = key.dropFirst(prefix.count).prefix { $0 != "/" }
        return name.contains(WriteBackEngine.caseRenameMarker)
    }
}
