/// `LocalChangeLog`: which paths the mount itself changed on Dropbox, and in which order, so that
/// a listing, a feed batch or a metadata answer fetched before such a change is never applied
/// over it.
///
/// The race it closes: the change watcher (or a listing) asks Dropbox for the state of the tree,
/// and while the answer travels the mount renames, deletes or creates something there itself and
/// updates its tree. Applying the older answer afterwards would undo the mount's own change in
/// its view: a renamed folder's children moved back under a folder that no longer exists, a
/// deleted file back, a file moved onto another one deleted (all seen with fsstress). The feed
/// reports the change later anyway; until then the older answer must not win.
///
/// The rule, applied by `MetadataCache` to everything fetched from Dropbox:
/// - take a `Stamp` before the fetch;
/// - at apply time (metadata lock held), first wait for the local changes in flight that began
///   before the answer arrived (their server calls may or may not be in the answer; once they
///   finish, the tree has their result);
/// - then skip every fetched change at or under a path that a local change completed since the
///   stamp (the tree's version of those paths is newer than the answer's);
/// - a listing's mark-and-sweep spares the same subtrees.
/// A local change that fails records nothing: whatever it did on the server, the fetched answer
/// is then the best knowledge of those paths. Commits of the write-back engine are recorded when
/// their event reaches the tree; until then the node is dirty, which the feed never overwrites.
///
/// Namespace operations (mkdir, unlink, rmdir, rename) reach Dropbox later, from the write-back
/// engine's queue, possibly hours later when offline: their paths are **pending** from the moment
/// they are journaled (registered before the operation may be sent) until the operation is
/// settled on Dropbox. Every fetched change at or under a pending path is skipped, and listing
/// sweeps spare those subtrees, however recent the answer: Dropbox does not show the operation
/// yet, and the tree does. When it is settled, its paths are recorded as completed, so answers
/// fetched before that still skip them; an operation that did not go as planned is followed by a
/// fresh fetch of its paths (`MetadataCache.refreshFromDropbox`). The in-flight wait only spans the
/// short local step (journal and tree update).
///
/// A plain value type: `MetadataCache` keeps the only instance under its lock (an
/// `NSCondition`, so appliers can wait for changes in flight).
struct LocalChangeLog {
    /// The log's position when a fetch started.
    struct Stamp: Sendable { let sequence: UInt64 }
    /// One local change in flight.
    struct Token: Sendable { fileprivate let id: UInt64 }

    /// Bumped by every completed local change.
    private var sequence: UInt64 = 0
    private var lastTokenID: UInt64 = 0
    private var inFlight: Set<UInt64> = []
    /// Path keys of completed changes, oldest first, with the sequence that completed them.
    private var completed: [(sequence: UInt64, key: String)] = []
    private var firstKept = 0
    /// Changes up to this sequence are no longer kept: answers fetched before it are refetched.
    private var forgottenThrough: UInt64 = 0
    private static let keep = 20_000
    /// Queued namespace operations not settled on Dropbox yet (by the engine's sequence), with
    /// the path keys each touches, and how many pending operations touch each key.
    private var pending: [UInt64: [String]] = [:]
    private var pendingKeys: [String: Int] = [:]

    var stamp: Stamp { Stamp(sequence: sequence) }

    /// The newest token issued so far: changes in flight up to it began before "now".
    var latestToken: UInt64 { lastTokenID }

    mutating func begin() -> Token {
        lastTokenID += 1
        inFlight.insert(lastTokenID)
        return Token(id: lastTokenID)
    }

    /// Ends a change; `keys` are the path keys it changed (empty if it failed).
    mutating func end(_ token: Token, changed keys: [String]) {
        inFlight.remove(token.id)
        record(keys)
    }

    /// A change whose server side is already done and whose tree update is being made now.
    mutating func record(_ keys: [String]) {
        guard !keys.isEmpty else { return }
        sequence += 1
        for key in keys { completed.append((sequence, key)) }
        if completed.count - firstKept > Self.keep {
            let drop = completed.count - firstKept - Self.keep / 2
            forgottenThrough = completed[firstKept + drop - 1].sequence
            firstKept += drop
            if firstKept > Self.keep { completed.removeFirst(firstKept); firstKept = 0 }
        }
    }

    /// Whether a change that began no later than token `id` is still in flight.
    func hasInFlight(beganBy id: UInt64) -> Bool { inFlight.contains { $0 <= id } }

    /// A namespace operation was journaled: its paths are pending until `settle`.
    mutating func addPending(_ operation: UInt64, keys: [String]) {
        guard pending[operation] == nil else { return }
        pending[operation] = keys
        for key in keys { pendingKeys[key, default: 0] += 1 }
    }

    /// The operation is settled on Dropbox: its paths are recorded as completed now.
    mutating func settle(_ operation: UInt64) {
        guard let keys = pending.removeValue(forKey: operation) else { return }
        for key in keys {
            let left = (pendingKeys[key] ?? 1) - 1
            pendingKeys[key] = left > 0 ? left : nil
        }
        record(keys)
    }

    /// Whether `path` is at or under the path of a pending operation.
    func isPending(_ path: String) -> Bool {
        guard !pendingKeys.isEmpty else { return false }
        var key = Substring(InodeTable.key(path))
        while !key.isEmpty {
            if pendingKeys[String(key)] != nil { return true }
            guard let slash = key.lastIndex(of: "/") else { break }
            key = key[..<slash]
        }
        return false
    }

    var pendingCount: Int { pending.count }

    /// The subtrees changed locally since `stamp`, and those of pending operations; nil if the
    /// log no longer reaches back that far (the caller then fetches again).
    func changed(since stamp: Stamp) -> ChangedPaths? {
        guard stamp.sequence >= forgottenThrough else { return nil }
        var keys = Set(pendingKeys.keys)
        var index = completed.count
        while index > firstKept, completed[index - 1].sequence > stamp.sequence {
            index -= 1
            keys.insert(completed[index].key)
        }
        return ChangedPaths(keys: keys)
    }
}

/// Subtrees the mount changed itself: a path is covered if it, or one of its ancestors, is one of
/// them. Keys are lowercased paths relative to the mount root ("/a/b"), as `InodeTable.key` makes them.
struct ChangedPaths {
    let keys: Set<String>
    var isEmpty: Bool { keys.isEmpty }

    func covers(_ path: String) -> Bool {
        guard !keys.isEmpty else { return false }
        var key = InodeTable.key(path)
        while !key.isEmpty {
            if keys.contains(key) { return true }
            guard let slash = key.lastIndex(of: "/") else { break }
            key = String(key[..<slash])
        }
        return false
    }

    func covers(_ change: RemoteChange) -> Bool {
        switch change {
        case .upsert(let entry): covers(entry.pathDisplay)
        case .deleted(_, let pathDisplay): covers(pathDisplay)
        }
    }
}
