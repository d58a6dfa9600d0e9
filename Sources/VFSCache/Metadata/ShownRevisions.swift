/// The order of the revs the tree showed for a file from the mount's own commits (and the other
/// version a conflict found), per file id. Dropbox's revs are opaque strings, so their order is
/// only known where the mount saw it happen: our commits land in turn. The change feed reports
/// every version in order, and Dropbox may end a page between two of them (or send a page empty
/// with more to come); a page that ends with an earlier commit of ours, applied after the tree
/// showed a later one, would take the file back in time until the next page (fsx: a file's size
/// went back to an earlier commit's; `theFeedNeverTakesAFileBackToAnOlderCommitOfOurOwn`).
///
/// A rev is kept until the feed has passed it: when the feed reports a rev of the file, the revs
/// noted before it can never come again (the feed is in order), so they go. What is kept is then
/// what the feed still owes, however far it lags (a file fsynced in a loop commits hundreds of
/// times a second; a fixed window of the last few revs let the older ones take the file back:
/// `aFeedManyCommitsBehindNeverTakesAFileBack`). Bounds below keep a feed that never reports
/// (a per-folder tree) from growing it without limit.
///
/// Kept under `MetadataCache.lock`.
struct ShownRevisions {
    /// Revs kept per file: a feed this far behind our own commits of one file is not expected.
    let perFile: Int
    /// Revs kept in all; the file noted longest ago is forgotten first.
    let total: Int

    init(perFile: Int = 4096, total: Int = 65_536) {
        self.perFile = perFile
        self.total = total
    }

    private var revs: [String: [String]] = [:]
    /// File ids in the order they were first noted (since last forgotten), from `orderStart` on:
    /// the ones before it are forgotten. Forgetting moves the start instead of shifting the array
    /// (`removeFirst` was O(n) for every commit once the total was reached: a mount that had
    /// committed 65,536 files paid a 1 MB memmove under the tree's lock for each commit after).
    private var order: [String] = []
    private var orderStart = 0
    private var count = 0

    /// `rev` of the file `id` was shown after every rev noted before it.
    mutating func note(_ rev: String, of id: String) {
        guard !id.isEmpty, !rev.isEmpty else { return }
        if revs[id] == nil { order.append(id) }
        var list = revs[id, default: []]
        count -= list.count
        list.removeAll { $0 == rev }
        list.append(rev)
        if list.count > perFile { list.removeFirst(list.count - perFile) }
        count += list.count
        revs[id] = list
        while count > total, orderStart < order.count {
            count -= revs.removeValue(forKey: order[orderStart])?.count ?? 0
            orderStart += 1
        }
        if orderStart > 4096, orderStart * 2 > order.count {
            order.removeFirst(orderStart)
            orderStart = 0
        }
    }

    /// `rev` of `id` came from Dropbox after our commits of it: noted after them, if any are kept
    /// (a rev already kept keeps its place: it is one of ours, or known already).
    mutating func noteIfKept(_ rev: String, of id: String) {
        guard let list = revs[id], !list.contains(rev) else { return }
        note(rev, of: id)
    }

    /// The feed reported `rev` of `id` (applied or not): the revs noted before it are passed.
    mutating func passed(_ rev: String, of id: String) {
        guard var list = revs[id], let index = list.firstIndex(of: rev), index > 0 else { return }
        list.removeFirst(index)
        count -= index
        revs[id] = list
    }

    /// True if both revs of `id` were noted and `rev` came before `shown`.
    func isEarlier(_ rev: String, than shown: String, of id: String) -> Bool {
        guard rev != shown, let list = revs[id], let a = list.firstIndex(of: rev), let b = list.firstIndex(of: shown) else { return false }
        return a < b
    }

    /// Revs kept, for tests.
    var keptCount: Int { count }
}
