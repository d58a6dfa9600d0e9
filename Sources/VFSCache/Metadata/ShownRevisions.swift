/// The order of the revs the tree showed for a file from the mount's own commits (and the other
/// version a conflict found), per file id. Dropbox's revs are opaque strings, so their order is
/// only known where the mount saw it happen: our commits land in turn. The change feed reports
/// every version in order, and Dropbox may end a page between two of them (or send a page empty
/// with more to come); a page that ends with an earlier commit of ours, applied after the tree
/// showed a later one, would take the file back in time until the next page (fsx: a file's size
/// went back to an earlier commit's; `theFeedNeverTakesAFileBackToAnOlderCommitOfOurOwn`).
/// Kept under `MetadataCache.lock`.
struct ShownRevisions {
    /// How many revs are kept per file: a feed page is never that far behind our own commits.
    static let perFile = 8
    /// How many files are remembered (the oldest noted is forgotten first).
    static let files = 4096

    private var revs: [String: [String]] = [:]
    private var order: [String] = []

    /// `rev` of the file `id` was shown after every rev noted before it.
    mutating func note(_ rev: String, of id: String) {
        guard !id.isEmpty, !rev.isEmpty else { return }
        if revs[id] == nil {
            order.append(id)
            if order.count > Self.files { revs[order.removeFirst()] = nil }
        }
        var list = revs[id, default: []]
        list.removeAll { $0 == rev }
        list.append(rev)
        if list.count > Self.perFile { list.removeFirst(list.count - Self.perFile) }
        revs[id] = list
    }

    /// True if both revs of `id` were noted and `rev` came before `shown`.
    func isEarlier(_ rev: String, than shown: String, of id: String) -> Bool {
        guard rev != shown, let list = revs[id], let a = list.firstIndex(of: rev), let b = list.firstIndex(of: shown) else { return false }
        return a < b
    }
}
