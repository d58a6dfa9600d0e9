/// The namespace dispatcher: a thread that sends the queued namespace operations
/// (NamespaceQueue.swift) to Dropbox, one batch at a time, in an order that respects the queue.
///
/// Batching: the operations are scanned oldest first. The first one that may go now starts the
/// batch; a later one joins it if it is of the same kind (mkdir → create_folder_batch; unlink and
/// rmdir → delete_batch; rename → move_batch_v2) and touches no path (equal, ancestor or
/// descendant) of an operation in the batch or of an earlier one left out. Operations on
/// disjoint subtrees commute on Dropbox, so `rm -rf` of 1000 files in 10 folders is one delete
/// batch for the files and one for the 10 folders, whatever order `rm` went in. Two mkdirs only
/// depend on each other when they name the same folder (Dropbox creates missing parents). At most
/// `maxNamespaceBatch` (1000, Dropbox's limit per delete and move batch) per call. A batch is
/// gathered for `namespaceGatherDelay` after the newest operation while operations keep coming
/// (at most `namespaceMaxGather`), unless someone waits (`dbxfs sync`, unmount).
///
/// Before a delete batch: a folder delete lists the folder (`limit: 1`); anything in it on
/// Dropbox (someone else's file, or a delete of ours Dropbox refused) drops the rmdir, since a
/// folder delete is recursive there. A file delete carries `parent_rev`; one without a rev (our
/// file's commit may have landed unheard) asks `get_metadata` and deletes only a file whose
/// content hash is ours. These checks run in parallel.
///
/// Outcomes, per entry (`NamespaceResult`): done; done but not as planned (a move whose source
/// was gone: Dropbox's state of both paths is fetched again); undone, when Dropbox holds
/// something that must win (a file changed since our rev, a folder not empty, a target already
/// there, a name or limit Dropbox refuses): the operation is dropped, logged, reported by `dbxfs
/// sync`, and the facade fetches the paths again so the mount shows what Dropbox has; failed:
/// retried with backoff (offline, rate limits, contention; an unavailable Dropbox pauses every
/// upload too), or held and retried slowly (auth, locked files, space) while what depends on it
/// waits. Nothing is ever overwritten or deleted that was not ours.
import Foundation
import Synchronization

/// How one operation of a batch ended.
enum NamespaceResult: Sendable {
    case done(RemoteEntry?)
    /// Done, but Dropbox's state of its paths is not what it made: fetch them again.
    case doneRefreshing
    /// Dropped: Dropbox holds something that wins over it.
    case undone(String)
    /// A delete to send again at this rev (our own commit, whose reply was lost, is there).
    case retryAt(rev: String)
    case failed(RemoteError)
}

extension WriteBackEngine {
    func namespaceLoop() {
        condition.lock()
        defer { condition.unlock() }
        while !stopped {
            let now = Date()
            var wake = now.addingTimeInterval(5)
            if namespaceHeld || dead {
                // Waiting for the facade's overlay at start (or dead).
            } else if pausedUntil > now {
                wake = min(wake, pausedUntil)
            } else if let gathering = namespaceGathering, gathering.until > now, gathering.urgentThrough == urgentThrough,
                      namespaceOperations.count < configuration.maxNamespaceBatch {
                wake = min(wake, gathering.until)
            } else if let batch = nextNamespaceBatch(now: now, wake: &wake) {
                let sequences = Set(batch.map(\.sequence))
                for index in namespaceOperations.indices where sequences.contains(namespaceOperations[index].sequence) {
                    namespaceOperations[index].inFlight = true
                }
                condition.unlock()
                let results = send(batch)
                condition.lock()
                settle(batch, results)
                continue
            }
            _ = condition.wait(until: wake)
        }
    }

    /// The next batch to send, or nil (then `wake` says when to look again).
    ///
    /// Gathering: the scan costs a pass over every queued operation, and each operation the
    /// facade journals wakes this loop, so `rm -rf` of 1000 files scanned the queue 1000 times
    /// while its batch gathered (a core busy for a second, most of it here). While a batch
    /// gathers, a new operation can only make it close later, never sooner, unless it fills the
    /// batch or someone starts waiting (`urgentThrough`): so the loop scans again only when the
    /// window it found has passed, or then.
    private func nextNamespaceBatch(now: Date, wake: inout Date) -> [NamespaceOperation]? {
        namespaceGathering = nil
        var batch: [NamespaceOperation] = []
        var kind: NamespaceOperationKind?
        var batchKeys = PathOverlapSet()
        var barrierMkdirs = PathOverlapSet(), barrierOthers = PathOverlapSet()
        var newest = Date.distantPast, oldest = Date.distantFuture
        var urgent = false
        for operation in namespaceOperations {
            let ready = operation.released && !operation.inFlight && operation.notBefore <= now
            if operation.released && !operation.inFlight && operation.notBefore > now { wake = min(wake, operation.notBefore) }
            let keys = operation.keys
            let blocked = operation.kind == .mkdir
                ? barrierOthers.overlaps(keys[0]) || barrierMkdirs.contains(keys[0])
                : keys.contains { barrierOthers.overlaps($0) || barrierMkdirs.overlaps($0) }
            var joins = ready && !blocked && batch.count < configuration.maxNamespaceBatch
            if joins, let kind {
                joins = operation.batchKind == kind
                    && (operation.kind == .mkdir ? !batchKeys.contains(keys[0]) : !keys.contains(where: batchKeys.overlaps))
            }
            if joins {
                batch.append(operation)
                kind = operation.batchKind
                for key in keys { batchKeys.insert(key) }
                newest = max(newest, operation.createdAt)
                oldest = min(oldest, operation.createdAt)
                if operation.sequence <= urgentThrough { urgent = true }
            } else {
                for key in keys { if operation.kind == .mkdir { barrierMkdirs.insert(key) } else { barrierOthers.insert(key) } }
            }
        }
        guard !batch.isEmpty else { return nil }
        // More may be on the way (rm -rf, tar x): gather them into this batch for a moment.
        if !urgent && batch.count < configuration.maxNamespaceBatch {
            let closeAt = min(newest.addingTimeInterval(configuration.namespaceGatherDelay),
                              oldest.addingTimeInterval(configuration.namespaceMaxGather))
            if closeAt > now {
                wake = min(wake, closeAt)
                namespaceGathering = (closeAt, urgentThrough)
                return nil
            }
        }
        return batch
    }

    // MARK: Sending (no lock held)

    private func send(_ batch: [NamespaceOperation]) -> [UInt64: NamespaceResult] {
        switch batch[0].batchKind {
        case .mkdir: return sendMkdirs(batch)
        case .move: return sendMoves(batch)
        case .delete, .deleteFolder: return sendDeletes(batch)
        }
    }

    private func sendMkdirs(_ batch: [NamespaceOperation]) -> [UInt64: NamespaceResult] {
        let results: [Result<RemoteEntry, RemoteError>]
        do { results = try remote.createFolders(batch.map(\.path)) } catch { return Self.all(batch, .failed(error)) }
        var out: [UInt64: NamespaceResult] = [:]
        var conflicts: [NamespaceOperation] = []
        for (operation, result) in zip(batch, results) {
            switch result {
            case .success(let entry): out[operation.sequence] = .done(entry)
            case .failure(.conflict): conflicts.append(operation)
            case .failure(let error): out[operation.sequence] = .failed(error)
            }
        }
        // Something is there already: a folder (a retry of ours whose first reply was lost, or the
        // same folder made elsewhere: done, its contents fetched), or a file, which wins.
        out.merge(concurrently(conflicts) { operation in
            do throws(RemoteError) {
                guard let entry = try self.remote.metadata(path: operation.path) else { return .failed(.other("\(operation.path): conflict, but nothing is there")) }
                return entry.isFolder ? .doneRefreshing : .undone("a file is at \(operation.path) on Dropbox")
            } catch { return .failed(error) }
        }) { $1 }
        return out
    }

    private func sendMoves(_ batch: [NamespaceOperation]) -> [UInt64: NamespaceResult] {
        let results: [Result<RemoteEntry, RemoteError>]
        do {
            results = try remote.moveBatch(batch.map { RemoteMove(from: $0.path, to: $0.target ?? $0.path) })
        } catch { return Self.all(batch, .failed(error)) }
        var out: [UInt64: NamespaceResult] = [:]
        for (operation, result) in zip(batch, results) {
            switch result {
            case .success(let entry): out[operation.sequence] = .done(entry)
            // Gone from Dropbox meanwhile (deleted elsewhere, or our own earlier attempt moved it):
            // what is at both paths now is fetched again.
            case .failure(.notFound): out[operation.sequence] = .doneRefreshing
            case .failure(.conflict): out[operation.sequence] = .undone("something is already at \(operation.target ?? "?") on Dropbox")
            case .failure(let error): out[operation.sequence] = .failed(error)
            }
        }
        return out
    }

    private func sendDeletes(_ batch: [NamespaceOperation]) -> [UInt64: NamespaceResult] {
        // Checks first: folders must still be empty, files without a rev must be ours.
        let checked = concurrently(batch) { operation -> (NamespaceResult?, RemoteDelete?) in
            do throws(RemoteError) {
                switch operation.kind {
                case .deleteFolder:
                    // Every page until an entry shows: Dropbox's first page may be empty while more
                    // follow (dropbox/dropbox-sdk-java#281), and a delete sent on it would take the
                    // folder's contents with it (`rmdirOfAFolderNotEmptyOnDropboxIsUndoneWhenTheFirstPageIsEmpty`).
                    var page = try self.remote.listFolder(path: operation.path, recursive: false, limit: 1)
                    while true {
                        if page.changes.contains(where: { if case .upsert = $0 { true } else { false } }) {
                            return (.undone("\(operation.path) is not empty on Dropbox"), nil)
                        }
                        guard page.hasMore else { break }
                        page = try self.remote.listFolderContinue(cursor: page.cursor)
                    }
                    return (nil, RemoteDelete(path: operation.path))
                case .delete where operation.parentRev != nil:
                    return (nil, RemoteDelete(path: operation.path, parentRev: operation.parentRev))
                default:
                    guard let entry = try self.remote.metadata(path: operation.path) else { return (.done(nil), nil) }
                    guard !entry.isFolder, let hash = entry.contentHash, operation.ownHashes.contains(hash), let rev = entry.rev else {
                        return (.undone("\(operation.path) on Dropbox is not ours"), nil)
                    }
                    return (nil, RemoteDelete(path: operation.path, parentRev: rev))
                }
            } catch .notFound {
                return (.done(nil), nil)
            } catch .notFolder {
                return (.undone("\(operation.path) is a file on Dropbox"), nil)
            } catch {
                return (.failed(error), nil)
            }
        }
        var out: [UInt64: NamespaceResult] = [:]
        var sending: [(NamespaceOperation, RemoteDelete)] = []
        for operation in batch {
            let (result, delete) = checked[operation.sequence] ?? (.failed(.other("no outcome for \(operation.summary)")), nil)
            if let result {
                out[operation.sequence] = result
            } else if let delete {
                sending.append((operation, delete))
            }
        }
        guard !sending.isEmpty else { return out }
        let results: [RemoteError?]
        do { results = try remote.deleteBatch(sending.map(\.1)) } catch {
            for (operation, _) in sending { out[operation.sequence] = .failed(error) }
            return out
        }
        var conflicts: [NamespaceOperation] = []
        for ((operation, _), error) in zip(sending, results) {
            switch error {
            case nil, .notFound?: out[operation.sequence] = .done(nil)
            case .conflict? where operation.kind == .delete: conflicts.append(operation)
            case let error?: out[operation.sequence] = .failed(error)
            }
        }
        // The file is no longer at our rev: changed elsewhere (theirs wins), unless what is there
        // is a commit of ours whose reply was lost.
        out.merge(concurrently(conflicts) { operation in
            do throws(RemoteError) {
                if let entry = try self.remote.metadata(path: operation.path), !entry.isFolder, let hash = entry.contentHash,
                   operation.ownHashes.contains(hash), let rev = entry.rev, rev != operation.parentRev {
                    return .retryAt(rev: rev)
                }
                return .undone("\(operation.path) was changed on Dropbox since")
            } catch .notFound {
                return .done(nil)
            } catch { return .failed(error) }
        }) { $1 }
        return out
    }

    private static func all(_ batch: [NamespaceOperation], _ result: NamespaceResult) -> [UInt64: NamespaceResult] {
        Dictionary(batch.map { ($0.sequence, result) }, uniquingKeysWith: { $1 })
    }

    /// Runs `body` for each operation on the namespace pool (checks are one round trip each).
    private func concurrently<T: Sendable>(_ operations: [NamespaceOperation],
                                           _ body: @escaping @Sendable (NamespaceOperation) -> T) -> [UInt64: T] {
        guard !operations.isEmpty else { return [:] }
        let results = Mutex<[UInt64: T]>([:])
        let group = DispatchGroup()
        for operation in operations {
            group.enter()
            let job: @Sendable () -> Void = {
                let result = body(operation)
                results.withLock { $0[operation.sequence] = result }
                group.leave()
            }
            if !namespacePool.submit(job) { job() }
        }
        group.wait()
        return results.withLock { $0 }
    }

    // MARK: Settling (lock held)

    private func settle(_ batch: [NamespaceOperation], _ results: [UInt64: NamespaceResult]) {
        guard !dead else { return }
        let now = Date()
        var finished: [UInt64] = []
        var changed: [NamespaceOperation] = []
        var events: [WriteBackEvent] = []
        for sent in batch {
            guard let index = namespaceOperations.firstIndex(where: { $0.sequence == sent.sequence }) else { continue }
            namespaceOperations[index].inFlight = false
            let operation = namespaceOperations[index]
            let paths = [operation.path] + (operation.target.map { [$0] } ?? [])
            var result = results[operation.sequence] ?? .failed(.other("no outcome"))
            if case .failed(let error) = result,
               case .undo(let reason) = NamespaceRetry.action(for: error, attempt: operation.attempts + 1, configuration: configuration) {
                result = .undone(reason)
            }
            switch result {
            case .done(let entry):
                finished.append(operation.sequence)
                offline = false
                events.append(.namespaceSettled(sequence: operation.sequence, refresh: [], entry: entry))
            case .doneRefreshing:
                finished.append(operation.sequence)
                offline = false
                events.append(.namespaceSettled(sequence: operation.sequence, refresh: paths, entry: nil))
            case .undone(let reason):
                finished.append(operation.sequence)
                offline = false
                WriteBackLog.warning("\(operation.summary) was undone: \(reason); the mount shows what Dropbox has there")
                undoneOperations.append(UndoneOperation(sequence: operation.sequence, summary: operation.summary,
                                                        path: operation.path, reason: reason, at: now))
                if undoneOperations.count > 1000 { undoneOperations.removeFirst(undoneOperations.count - 1000) }
                noteError(path: operation.path, "\(operation.summary) undone: \(reason)", at: now)
                events.append(.namespaceSettled(sequence: operation.sequence, refresh: paths, entry: nil))
            case .retryAt(let rev):
                namespaceOperations[index].parentRev = rev
                namespaceOperations[index].attempts += 1
                changed.append(namespaceOperations[index])
            case .failed(let error):
                fail(index, error, now: now)
                changed.append(namespaceOperations[index])
            }
        }
        do {
            try journal.database.transaction(durable: false) {
                for sequence in finished { try journal.deleteNamespaceOperation(sequence) }
                for operation in changed { try journal.save(operation) }
            }
        } catch {
            // A row left behind is sent again at the next start, where it finds its work done.
            WriteBackLog.error("cannot update the journal's namespace operations: \(error)")
        }
        for sequence in finished { dequeue(sequence) }
        for event in events { emit(event) }
        if !batch.isEmpty { WriteBackLog.debug("sent \(batch.count) × \(batch[0].batchKind.rawValue) in one batch: \(finished.count) done") }
        condition.broadcast()
    }

    /// A failed attempt: retried with backoff, held, or undone (lock held).
    private func fail(_ index: Int, _ error: RemoteError, now: Date) {
        namespaceOperations[index].attempts += 1
        namespaceOperations[index].lastError = "\(error)"
        if case .unavailable(let why) = error { namespaceOperations[index].unreachable = why } else { namespaceOperations[index].unreachable = nil }
        let operation = namespaceOperations[index]
        switch NamespaceRetry.action(for: error, attempt: operation.attempts, configuration: configuration) {
        case .retry(let delay, let pauseAll):
            namespaceOperations[index].notBefore = now.addingTimeInterval(delay)
            if pauseAll {
                pausedUntil = max(pausedUntil, now.addingTimeInterval(delay))
                if case .unavailable = error { offline = true }
            }
            WriteBackLog.warning("will retry \(operation.summary) (attempt \(operation.attempts)): \(error)")
        case .hold:
            namespaceOperations[index].hardError = error
            namespaceOperations[index].failedAt = now
            namespaceOperations[index].notBefore = now.addingTimeInterval(configuration.hardFailureRetryDelay)
            WriteBackLog.warning("cannot do \(operation.summary) on Dropbox yet (attempt \(operation.attempts)): \(error); kept and retried")
            noteError(path: operation.path, "\(operation.summary): \(error)", at: now)
        case .undo:
            break   // settled as undone before it gets here
        }
    }

    func noteError(path: String, _ message: String, at now: Date) {
        recentErrors.append(UploadErrorReport(path: path, message: message, at: now))
        if recentErrors.count > 50 { recentErrors.removeFirst(recentErrors.count - 50) }
    }
}

/// An operation Dropbox would not take: for `dbxfs sync` to name once.
struct UndoneOperation: Sendable {
    let sequence: UInt64
    let summary: String
    let path: String
    let reason: String
    let at: Date
}

/// What a failed namespace operation does next.
enum NamespaceRetry {
    enum Action: Equatable {
        /// Retry after `delay`; `pauseAll` also holds back every upload (offline, 429).
        case retry(delay: TimeInterval, pauseAll: Bool)
        /// Needs time or a person: kept, reported, retried after the long delay.
        case hold
        /// Dropbox refuses it for good: dropped, and the paths shown as Dropbox has them.
        case undo(String)
    }

    static func action(for error: RemoteError, attempt: Int, configuration: WriteBackConfiguration) -> Action {
        let backoff = UploadRetryPolicy.delay(attempt: attempt, configuration: configuration)
        switch error {
        case .unavailable:
            return .retry(delay: backoff, pauseAll: true)
        case .rateLimited(let retryAfter):
            return .retry(delay: max(backoff, retryAfter), pauseAll: true)
        case .cancelled, .sessionGone, .cursorReset, .notFound:
            return .retry(delay: backoff, pauseAll: false)
        case .other:
            return attempt >= 5 ? .hold : .retry(delay: backoff, pauseAll: false)
        case .auth, .insufficientSpace, .locked, .restrictedContent:
            return .hold
        case .conflict(let what): return .undo("Dropbox answered conflict (\(what))")
        case .notFolder(let what): return .undo("a file is in the way on Dropbox (\(what))")
        case .notFile(let what): return .undo("not a file on Dropbox (\(what))")
        case .disallowedName(let what): return .undo("Dropbox refuses the name (\(what))")
        case .malformedPath(let what): return .undo("Dropbox refuses the path (\(what))")
        case .permissionDenied(let what): return .undo("no write permission (\(what))")
        case .invalidOperation(let what): return .undo("Dropbox refuses the operation (\(what))")
        case .tooManyFiles(let what): return .undo("too many files and folders for one move (\(what))")
        }
    }
}
