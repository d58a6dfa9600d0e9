/// `PinnedFiles`: files kept available offline (`dbxfs pin`, docs/SEMANTICS.md "Available
/// offline"). A pin is a path relative to the mount root, a file or a folder (then everything in
/// it, recursively). Every file under a pin is downloaded into the disk cache, checked against
/// Dropbox's content hash, and kept: the disk cache never evicts a pinned file's blocks
/// (PinnedBlockIndex.swift). When the change feed brings a new revision of a pinned file, or a new
/// file under a pinned folder, the pin's thread fetches it, so a pinned tree reads offline at its
/// latest known revision.
///
/// Pins are the user's choice and are kept in the cache directory's SQLite state
/// (`MetadataStore`, table `pins`); at mount every pinned file is checked again (its blocks read
/// back from disk and hashed; what is missing or wrong is downloaded).
///
/// A pin that does not fit in the disk cache's budget, beside what is pinned already, is refused
/// up front (`PinRefusal.doesNotFit`); a pinned folder that grows past the budget later marks the
/// files that no longer fit as failed, and says so.
///
/// Lock order: `reconciling` (one reconcile at a time), then `MetadataCache.lock` (released
/// before the next), then `condition` (this object's state), then `DiskBlockCache.lock` (only
/// after `condition` is released). `condition` and the metadata lock are never held across a
/// download or disk I/O; `reconciling` is (saving a pin, the evictions `setPinned` makes).
import ContentHash
import Foundation
import Synchronization

/// Why a pin or unpin was not made (the control service words it for the user).
public enum PinRefusal: Error, Sendable, Equatable {
    /// Nothing at the path.
    case notFound
    /// The mount keeps no disk cache (`--cache-size 0`).
    case noDiskCache
    /// The files under the path need `needed` more bytes than the budget has left beside the
    /// `pinned` bytes pinned already.
    case doesNotFit(needed: UInt64, budget: Int64, pinned: UInt64)
    /// Unpin of a path that is not pinned; `within` is the pinned folder that holds it, if any.
    case notPinned(within: String?)
    /// A folder under the path could not be listed (Dropbox unreachable, say).
    case listing(path: String, Errno)
}

/// Counts over pinned files: how many, their bytes, and where their download stands.
public struct PinCounts: Sendable, Equatable {
    public var files = 0
    public var bytes: UInt64 = 0
    /// Downloaded, checked against the content hash, and on disk at their latest known revision.
    public var current = 0
    /// Waiting to be fetched or being fetched.
    public var fetching = 0
    /// The last attempt failed (retried every few seconds).
    public var failed = 0
    /// Bytes of the current files plus what the fetches under way have.
    public var bytesFetched: UInt64 = 0
}

/// One pin as `dbxfs pin --list` shows it.
public struct PinSummary: Sendable {
    /// As the pin was made (the tree's display case), relative to the mount root.
    public var path: String
    /// False while nothing is at the path (deleted or moved on Dropbox; pinned again if it comes back).
    public var exists: Bool
    public var counts: PinCounts
    /// Files whose last fetch failed, with why (at most 20).
    public var failures: [(path: String, message: String)]
}

/// The answer to a pin or an unpin.
public struct PinChange: Sendable {
    public var path: String
    public var files: Int
    public var bytes: UInt64
    /// Pin: the path was pinned already (nothing new). Unpin: always false.
    public var alreadyPinned: Bool
}

public final class PinnedFiles: @unchecked Sendable {
    // @unchecked: `state` is only touched with `condition` locked.

    /// A pinned file as the pin's thread tracks it (keyed by Dropbox file id).
    private struct PinnedFile {
        var path: String
        var rev: String
        var size: UInt64
        var contentHash: String?
        var phase: Phase
        var bytesDone: UInt64 = 0
        /// When the last fetch failed (TimeSource seconds), for the retry delay.
        var failedAt: Double = 0
    }

    private enum Phase: Equatable {
        case queued, fetching, current
        case failed(String)
    }

    /// What the tree says a pinned file is now.
    private struct Wanted {
        var path: String
        var rev: String
        var size: UInt64
        var contentHash: String?
    }

    private struct State {
        /// Pinned paths relative to the mount root, unique ignoring case.
        var pins: [String] = []
        /// Pins with nothing at their path at the last reconcile (lowercased).
        var missing: Set<String> = []
        var files: [String: PinnedFile] = [:]
        /// Ids of queued files, in the order they were queued (may hold stale ids: checked on pop).
        var queue: [String] = []
        var reconcileWanted = true
        var stopping = false
        var running = false
    }

    private let vfs: VFS
    private let store: MetadataStore?
    private let log: Logger
    private let clock: TimeSource
    /// Seconds before a failed file is tried again.
    let retryDelay: Double
    /// Blocks of one file fetched at once: parallel range requests, as read-ahead makes, so a
    /// pin downloads about as fast as a cold read (up to 16 MiB in flight with 4 MiB blocks).
    static let parallelBlocks: UInt64 = 4
    private let condition = NSCondition()
    private var state = State()
    private let reconciling = Mutex(())

    /// Loads the saved pins (nothing is fetched before `start`).
    public init(vfs: VFS, store: MetadataStore?, retryDelay: Double = 5, clock: TimeSource = .monotonic) {
        self.vfs = vfs
        self.store = store
        self.log = vfs.logger
        self.retryDelay = retryDelay
        self.clock = clock
        do {
            state.pins = try store?.pinnedPaths() ?? []
        } catch {
            log.warning("cannot read the pinned paths in \(store?.path ?? "the metadata store"): \(error); nothing is pinned until pinned again")
        }
        if !state.pins.isEmpty {
            log.info("\(state.pins.count) pinned path\(state.pins.count == 1 ? "" : "s"): checking the pinned files on disk")
        }
    }

    /// Starts the pin thread: checks every pinned file, then follows the tree's changes.
    public func start() {
        vfs.observeTreeChanges { [weak self] in self?.treeChanged() }
        let thread = Thread { [self] in
            run()
            condition.withLock {
                state.running = false
                condition.broadcast()
            }
        }
        thread.name = "dbxfs-pins"
        condition.withLock { state.running = true }
        thread.start()
    }

    /// Stops the thread: a fetch under way ends after its current block, which this waits for
    /// (up to `timeout` seconds), so nothing is written to the disk cache after the mount stops.
    public func stop(timeout: Double = 10) {
        let deadline = Date(timeIntervalSinceNow: timeout)
        condition.lock()
        defer { condition.unlock() }
        state.stopping = true
        condition.broadcast()
        while state.running, condition.wait(until: deadline) {}
    }

    /// The change feed changed the tree: the pin thread looks at what pinned files need.
    func treeChanged() {
        condition.withLock {
            state.reconcileWanted = true
            condition.broadcast()
        }
    }

    // MARK: Pin, unpin, list

    /// Pins the file or folder at `path` (relative to the mount root: "" or "/a/b"), listing the
    /// folders under it as needed. Refused, with nothing changed, when it does not fit.
    public func pin(_ path: String) throws(PinRefusal) -> PinChange {
        guard let disk = vfs.blocks.disk else { throw .noDiskCache }
        let found: Node?
        do throws(Errno) {
            found = try vfs.listedNode(at: path)
            if let found, found.isDirectory { try listAll(under: found.ino) }
        } catch {
            throw .listing(path: path, error)
        }
        guard let node = found else { throw .notFound }
        return try reconciling.withLock { _ throws(PinRefusal) -> PinChange in
            var wanted: [String: Wanted] = [:]
            let shown = vfs.metadata.locked { table -> String in
                let shown = table.path(of: node.ino) ?? path
                Self.collect(table, node.ino, path: shown, into: &wanted)
                return shown
            }
            let bytes = wanted.values.reduce(UInt64(0)) { $0 + $1.size }
            condition.lock()
            let pinnedBytes = state.files.values.reduce(UInt64(0)) { $0 + $1.size }
            let needed = wanted.filter { state.files[$0.key] == nil }.values.reduce(UInt64(0)) { $0 + $1.size }
            if pinnedBytes + needed > UInt64(max(disk.budget, 0)) {
                condition.unlock()
                throw .doesNotFit(needed: needed, budget: disk.budget, pinned: pinnedBytes)
            }
            let already = state.pins.contains { $0.lowercased() == shown.lowercased() }
            if !already { state.pins.append(shown) }
            condition.unlock()
            if !already {
                do { try store?.savePin(shown) } catch { log.warning("cannot save the pin of \(shown): \(error); it lasts until unmount") }
                log.info("pinned \(shown.isEmpty ? "/" : shown): \(wanted.count) files, \(bytes) bytes")
            }
            reconcileLocked()
            return PinChange(path: shown, files: wanted.count, bytes: bytes, alreadyPinned: already)
        }
    }

    /// Unpins `path` and every pin under it. Their files' blocks stay cached, now the first to
    /// be evicted when room is needed.
    public func unpin(_ path: String) throws(PinRefusal) -> PinChange {
        let lower = Self.normalized(path).lowercased()
        return try reconciling.withLock { _ throws(PinRefusal) -> PinChange in
            condition.lock()
            let removed = state.pins.filter { Self.isAtOrUnder($0.lowercased(), lower) }
            guard !removed.isEmpty else {
                let within = state.pins.first { Self.isAtOrUnder(lower, $0.lowercased()) }
                condition.unlock()
                throw .notPinned(within: within)
            }
            condition.unlock()
            let counts = condition.withLock {
                Self.count(state.files.values.filter { Self.isAtOrUnder($0.path.lowercased(), lower) })
            }
            condition.withLock { state.pins.removeAll { Self.isAtOrUnder($0.lowercased(), lower) } }
            for pin in removed {
                do { try store?.deletePin(pin) } catch { log.warning("cannot forget the pin of \(pin): \(error)") }
            }
            log.info("unpinned \(removed.map { $0.isEmpty ? "/" : $0 }.joined(separator: ", "))")
            reconcileLocked()
            return PinChange(path: removed.first { $0.lowercased() == lower } ?? path, files: counts.files, bytes: counts.bytes,
                             alreadyPinned: false)
        }
    }

    /// Every pin, in path order, with where its files stand.
    public func list() -> [PinSummary] {
        reconcileIfWanted()
        return summaries()
    }

    /// All pinned files together (a file under two pins counts once); nil when nothing is pinned.
    public func totals() -> (pins: Int, counts: PinCounts, diskBytes: Int64)? {
        reconcileIfWanted()
        let (pins, counts) = condition.withLock { () -> (Int, PinCounts) in
            (state.pins.count, Self.count(state.files.values))
        }
        guard pins > 0 else { return nil }
        return (pins, counts, vfs.blocks.disk?.pinnedBytes ?? 0)
    }

    private func summaries() -> [PinSummary] {
        condition.withLock {
            state.pins.sorted { $0.lowercased() < $1.lowercased() }.map { pin in
                let lower = pin.lowercased()
                let files = state.files.values.filter { Self.isAtOrUnder($0.path.lowercased(), lower) }
                let failures = files.compactMap { file -> (String, String)? in
                    if case .failed(let why) = file.phase { return (file.path, why) } else { return nil }
                }.sorted { $0.0 < $1.0 }.prefix(20)
                return PinSummary(path: pin, exists: !state.missing.contains(lower), counts: Self.count(files),
                                  failures: failures.map { (path: $0.0, message: $0.1) })
            }
        }
    }

    private static func count(_ files: some Sequence<PinnedFile>) -> PinCounts {
        var counts = PinCounts()
        for file in files {
            counts.files += 1
            counts.bytes += file.size
            switch file.phase {
            case .current: counts.current += 1; counts.bytesFetched += file.size
            case .queued: counts.fetching += 1
            case .fetching: counts.fetching += 1; counts.bytesFetched += file.bytesDone
            case .failed: counts.failed += 1
            }
        }
        return counts
    }

    /// "" or "/a/b", whatever slashes were typed.
    static func normalized(_ path: String) -> String {
        path.split(separator: "/").reduce(into: "") { $0 += "/" + $1 }
    }

    /// `path` is `folder` or inside it (both lowercased; "" is the root).
    static func isAtOrUnder(_ path: String, _ folder: String) -> Bool {
        folder.isEmpty || path == folder || path.hasPrefix(folder + "/")
    }

    /// Lists every folder under `ino` that is not listed yet (nothing when the whole tree is held).
    private func listAll(under ino: InodeNumber) throws(Errno) {
        var folders = [ino]
        while let folder = folders.popLast() {
            for child in try vfs.metadata.snapshot(of: folder) where vfs.metadata.node(child.ino)?.isDirectory == true {
                folders.append(child.ino)
            }
        }
    }

    // MARK: Reconcile: what the tree says is pinned

    /// Every file under `ino` Dropbox can give us (not the ones with local bytes pending: those
    /// are fetched once their upload is committed; not export-only files, which have no bytes).
    private static func collect(_ table: InodeTable, _ ino: InodeNumber, path: String, into wanted: inout [String: Wanted]) {
        guard let node = table[ino] else { return }
        switch node.kind {
        case .file(let file):
            guard node.local == .remote, !node.isExportOnly, let id = node.id else { return }
            wanted[id] = Wanted(path: path, rev: file.rev, size: file.size, contentHash: file.contentHash)
        case .directory:
            for child in node.children.values {
                guard let name = table[child]?.name else { continue }
                collect(table, child, path: path + "/" + name, into: &wanted)
            }
        }
    }

    private func reconcile() { reconciling.withLock { _ in reconcileLocked() } }

    /// A tree change not looked at yet is looked at now, so an answer never shows pinned files
    /// as current at a revision the tree has already replaced.
    private func reconcileIfWanted() {
        if condition.withLock({ state.reconcileWanted }) { reconcile() }
    }

    /// Brings the pinned files in line with the tree: new files and new revisions are queued, files
    /// no longer under a pin are dropped, and the disk cache keeps exactly the pinned files.
    /// Called with `reconciling` held.
    private func reconcileLocked() {
        let pins = condition.withLock { state.pins }
        var wanted: [String: Wanted] = [:]
        var missing = Set<String>()
        vfs.metadata.locked { table in
            for pin in pins {
                guard let ino = table.resolve(path: pin) else { missing.insert(pin.lowercased()); continue }
                Self.collect(table, ino, path: table.path(of: ino) ?? pin, into: &wanted)
            }
        }
        // Files past the budget (a pinned folder that grew) are not fetched; in path order, so
        // the same files stay out each time.
        let budget = UInt64(max(vfs.blocks.disk?.budget ?? 0, 0))
        var total: UInt64 = 0
        var overBudget = Set<String>()
        for (id, file) in wanted.sorted(by: { $0.value.path < $1.value.path }) {
            total += file.size
            if total > budget { overBudget.insert(id) }
        }
        condition.withLock {
            state.missing = missing
            var files: [String: PinnedFile] = [:]
            for (id, want) in wanted {
                var file = state.files[id] ?? PinnedFile(path: want.path, rev: "", size: want.size, contentHash: nil, phase: .queued)
                file.path = want.path
                if file.rev != want.rev || file.contentHash != want.contentHash || file.size != want.size {
                    file = PinnedFile(path: want.path, rev: want.rev, size: want.size, contentHash: want.contentHash, phase: .queued)
                    state.queue.append(id)
                }
                if overBudget.contains(id) {
                    file.phase = .failed("it does not fit in the disk cache budget of \(budget) bytes beside the other pinned files (\(total) bytes in all)")
                } else if case .failed(let why) = file.phase, why.hasPrefix("it does not fit") {
                    file.phase = .queued
                    state.queue.append(id)
                }
                files[id] = file
            }
            state.files = files
            state.reconcileWanted = false
            condition.broadcast()
        }
        vfs.blocks.disk?.setPinned(Set(wanted.keys).subtracting(overBudget))
    }

    // MARK: The pin thread

    private enum Job { case stop, reconcile, fetch(id: String, PinnedFile) }

    private func run() {
        while true {
            switch nextJob() {
            case .stop: return
            case .reconcile: reconcile()
            case .fetch(let id, let file): fetch(id, file)
            }
        }
    }

    /// Waits for something to do: stop, a reconcile, a queued file, or a failed file whose retry
    /// is due.
    private func nextJob() -> Job {
        condition.lock()
        defer { condition.unlock() }
        while true {
            if state.stopping { return .stop }
            if state.reconcileWanted { return .reconcile }
            while let id = state.queue.first {
                state.queue.removeFirst()
                guard var file = state.files[id], file.phase == .queued else { continue }
                file.phase = .fetching
                file.bytesDone = 0
                state.files[id] = file
                return .fetch(id: id, file)
            }
            let now = clock.now()
            var nextRetry: Double?
            for (id, file) in state.files {
                guard case .failed(let why) = file.phase, !why.hasPrefix("it does not fit") else { continue }
                if now - file.failedAt >= retryDelay {
                    state.files[id]?.phase = .queued
                    state.queue.append(id)
                } else {
                    nextRetry = min(nextRetry ?? .infinity, file.failedAt + retryDelay - now)
                }
            }
            if !state.queue.isEmpty { continue }
            _ = condition.wait(until: Date(timeIntervalSinceNow: min(nextRetry ?? 60, 60)))
        }
    }

    /// Whether the file is still wanted at this revision (not unpinned, changed, or stopping).
    private func stillWanted(_ id: String, rev: String) -> Bool {
        condition.withLock { !state.stopping && state.files[id]?.rev == rev && state.files[id]?.phase == .fetching }
    }

    /// Makes sure every block of the file is on disk (read back, or downloaded and written), and
    /// checks the whole against the content hash.
    private func fetch(_ id: String, _ file: PinnedFile) {
        let blockSize = UInt64(vfs.config.blockSize)
        let count = file.size == 0 ? 0 : (file.size - 1) / blockSize + 1
        let piece = UInt64(DropboxContentHasher.blockSize)
        var verifier = file.contentHash.map {
            ContentVerifier(expected: $0, size: file.size, usesPieceDigests: vfs.blocks.usesPieceDigests)
        }
        var outcome: ContentVerifier.Outcome = .pending
        var next: UInt64 = 0
        while next < count {
            guard stillWanted(id, rev: file.rev) else {
                dropIfReplaced(id, rev: file.rev)
                return
            }
            // A few blocks at once (parallel range requests, as read-ahead makes), checked in order.
            let requests = (next..<min(next + Self.parallelBlocks, count)).map { index in
                let start = index * blockSize
                return BlockRequest(key: BlockKey(fileID: id, rev: file.rev, index: index), path: file.path,
                                    range: start..<min(start + blockSize, file.size))
            }
            next += UInt64(requests.count)
            let results = Mutex<[Result<CachedBlock, FetchFailure>?]>(Array(repeating: nil, count: requests.count))
            DispatchQueue.concurrentPerform(iterations: requests.count) { position in
                let result = vfs.blocks.pinBlock(requests[position])
                results.withLock { $0[position] = result }
            }
            for (request, result) in zip(requests, results.withLock { $0 }) {
                let block: CachedBlock
                switch result {
                case .success(let fetched)?: block = fetched
                case .failure(let failure)? where failure.errno == .again:
                    // Purged under us (a new revision, or a hash mismatch elsewhere): look again.
                    requeue(id, rev: file.rev)
                    dropIfReplaced(id, rev: file.rev)
                    return
                case .failure(let failure)?:
                    finish(id, rev: file.rev, failure.cause)
                    return
                case nil:
                    finish(id, rev: file.rev, "a block was not fetched")
                    return
                }
                let start = request.range.lowerBound
                if verifier != nil {
                    outcome = verifier!.feed(offset: start, block.buffer) { number in
                        let offset = number * piece
                        guard offset >= start, offset < request.range.upperBound else { return nil }
                        return PieceSource(block: block, slot: Int((offset - start) / piece))
                    }
                }
                condition.withLock {
                    if state.files[id]?.rev == file.rev { state.files[id]?.bytesDone = request.range.upperBound }
                }
            }
        }
        switch outcome {
        case .mismatched(let actual):
            log.error("pinned \(file.path) (rev \(file.rev)): content hash mismatch (expected \(file.contentHash ?? "?"), got \(actual)); dropping its blocks, fetched again")
            vfs.blocks.purge(fileID: id, rev: file.rev)
            finish(id, rev: file.rev, "its bytes did not match Dropbox's content hash; it is downloaded again")
        case .abandoned:
            finish(id, rev: file.rev, "its content hash could not be checked")
        case .matched, .pending:
            // pending: an empty file (nothing to check), or one Dropbox gave no hash.
            finish(id, rev: file.rev, nil)
        }
    }

    /// A fetch that was purged under it goes back in the queue (if the file is still wanted at
    /// that revision).
    private func requeue(_ id: String, rev: String) {
        condition.withLock {
            guard state.files[id]?.rev == rev, state.files[id]?.phase == .fetching else { return }
            state.files[id]?.phase = .queued
            state.queue.append(id)
            condition.broadcast()
        }
    }

    /// A fetch that stopped because the file has another revision now may have written blocks of
    /// the old one after the feed purged it: pinned (same file id), they would never be evicted.
    private func dropIfReplaced(_ id: String, rev: String) {
        let replaced = condition.withLock { state.files[id].map { $0.rev != rev } ?? false }
        if replaced { vfs.blocks.disk?.purge(fileID: id, rev: rev) }
    }

    /// Ends a fetch: current (`failure` nil), or failed with the reason (tried again later).
    private func finish(_ id: String, rev: String, _ failure: String?) {
        let path: String? = condition.withLock {
            guard var file = state.files[id], file.rev == rev, file.phase == .fetching else { return nil }
            if let failure {
                file.phase = .failed(failure)
                file.failedAt = clock.now()
            } else {
                file.phase = .current
                file.bytesDone = file.size
            }
            state.files[id] = file
            condition.broadcast()
            return file.path
        }
        guard let path else {
            dropIfReplaced(id, rev: rev)
            return
        }
        if let failure {
            log.warning("pinned \(path): not available offline yet: \(failure); trying again in \(Int(retryDelay)) s")
        } else {
            log.debug("pinned \(path) (rev \(rev)): on disk and verified")
        }
    }

    /// Waits until no pinned file is queued or being fetched, or `deadline` (tests).
    func waitUntilSettled(deadline: Date) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while state.reconcileWanted || state.files.values.contains(where: { $0.phase == .queued || $0.phase == .fetching }) {
            guard condition.wait(until: deadline) else { return false }
        }
        return true
    }
}
