/// The namespace queue of the write-back engine: how the facade's mkdir, unlink, rmdir and rename
/// become journaled operations (NamespaceOperation.swift), and what waits for them.
///
/// Each call holds the paths (no upload of them starts, and it waits until none is in flight, as
/// `remove`/`rename` always did), then in ONE journal transaction drops or moves the rows of the
/// dirty files concerned and writes the operations, then runs the facade's `show` (its tree
/// update, and the paths registered as pending in `LocalChangeLog`) before the operations may be
/// sent: so their outcome can never reach the tree before the change itself did. The transaction
/// is written without a disk flush (like a local filesystem's unlink or rename, it survives the
/// process being killed; a power cut only once a later durable commit, such as the next close,
/// flushed the WAL).
///
/// What waits for what:
/// - an upload waits while an operation is queued at, above or below its path (a file moved with
///   its folder commits at the new path only once the move is done; a file made again after an
///   unlink is added only after the delete);
/// - operations never wait for uploads: the holding at journaling time is local and quick;
/// - `dbxfs sync` and unmount wait for the operations journaled before them (`waitForAll`).
///
/// What Dropbox holds of a file is known from the engine's own state when the file is dirty (its
/// base rev, and the hashes of commits whose replies were lost), else from the facade's tree (the
/// rev it shows, asked for once the engine's pending events reached the tree: `revs`); either is
/// moved past the commits of ours that landed at the path since (`latestOwn`). A file
/// Dropbox never had needs no operation at all: unlinking or
/// renaming a file that is still only local costs nothing remote, and renaming such a file onto
/// an existing one becomes one commit that updates the target's rev (no delete, no move).
import Foundation

/// What a rename replaces at its target.
public enum ReplacedTarget: Sendable, Equatable {
    /// An empty folder (the facade checked): deleted first, if still empty on Dropbox.
    case folder
    /// A file.
    case file
}

/// A queued operation, as the facade's overlay at start and `status` see it.
public struct NamespaceOperationSnapshot: Sendable, Equatable {
    public var sequence: UInt64
    public var kind: NamespaceOperationKind
    public var path: String
    public var target: String?
}

/// What Dropbox holds at a path that is ours to delete or move, as far as the engine knows.
struct RemotePresence {
    var base: WriteBase
    /// Content hashes of commits of ours whose outcome was never heard.
    var hashes: [String]
    var onDropbox: Bool { base != .newFile || !hashes.isEmpty }
    var parentRev: String? { if case .revision(let rev) = base { rev } else { nil } }
}

/// An operation to journal (its sequence is assigned when it is).
struct NamespaceDraft {
    var kind: NamespaceOperationKind
    var path: String
    var target: String? = nil
    var presence: RemotePresence? = nil
}

extension WriteBackEngine {
    // MARK: Journaling the facade's namespace changes

    /// mkdir: journals the folder's creation. `show` gets the operations' sequences.
    public func journalMkdir(path: String, whileHeld show: ([UInt64]) -> Void) throws(Errno) {
        let key = Self.key(path)
        try holding([key]) { () throws(Errno) in
            condition.lock()
            let operations: [NamespaceOperation]
            do throws(Errno) {
                operations = try commitOperations([NamespaceDraft(kind: .mkdir, path: path)], deleting: [], saving: [])
            } catch { condition.unlock(); throw error }
            condition.unlock()
            showAndRelease(operations, show)
        }
    }

    /// unlink: cancels the file's uploads, drops its row and journals its delete on Dropbox (only
    /// at the rev Dropbox has of ours; none if Dropbox never had it). `rev`: the rev the facade
    /// shows for the file, asked once every event emitted so far has reached the facade.
    public func journalUnlink(path: String, rev: () -> String?, whileHeld show: ([UInt64]) -> Void) throws(Errno) {
        try journalRemoval(path: path, folder: false, rev: rev, show)
    }

    /// rmdir of a folder the facade found empty: journals its delete, which Dropbox only gets if
    /// the folder is still empty there.
    public func journalRmdir(path: String, whileHeld show: ([UInt64]) -> Void) throws(Errno) {
        try journalRemoval(path: path, folder: true, rev: { nil }, show)
    }

    private func journalRemoval(path: String, folder: Bool, rev: () -> String?, _ show: ([UInt64]) -> Void) throws(Errno) {
        let key = Self.key(path)
        try holding([key]) { () throws(Errno) in
            // No upload of the path is in flight now: once its events reached the tree, the
            // facade's rev is the latest one.
            deliverPendingEvents()
            let cleanRev = folder ? nil : rev()
            condition.lock()
            let doomed = keysUnder(key).compactMap { files[$0] }
            var drafts: [NamespaceDraft] = []
            if folder {
                drafts.append(NamespaceDraft(kind: .deleteFolder, path: path))
            } else {
                let presence = remotePresence(key, cleanRev: cleanRev)
                if presence.onDropbox { drafts.append(NamespaceDraft(kind: .delete, path: path, presence: presence)) }
            }
            let operations: [NamespaceOperation]
            do throws(Errno) {
                operations = try commitOperations(drafts, deleting: doomed.compactMap(\.record).map(\.pathKey), saving: [])
            } catch { condition.unlock(); throw error }
            discard(doomed)
            // Our earlier commits at these paths say nothing about a file made there later.
            forgetOwnRevisions(under: key)
            condition.unlock()
            showAndRelease(operations, show)
        }
    }

    /// rename (not case-only: `renameChangingCase`): moves the rows of the dirty files at and
    /// under `from` to their new paths, drops those replaced at `to`, and journals what Dropbox
    /// must do: delete the replaced target (a file at its rev, an empty folder), then move.
    /// `revs`: the revs the facade shows for the source and the replaced file (nil for folders),
    /// asked once every event emitted so far has reached the facade.
    public func journalRename(from: String, to: String, folder: Bool, replacing: ReplacedTarget?,
                              revs: () -> (source: String?, target: String?),
                              whileHeld show: ([UInt64]) -> Void) throws(Errno) {
        let fromKey = Self.key(from), toKey = Self.key(to)
        precondition(fromKey != toKey, "a case-only rename goes through renameChangingCase")
        try holding([fromKey, toKey]) { () throws(Errno) in
            deliverPendingEvents()
            let (cleanRev, targetRev) = revs()
            condition.lock()
            let replaced = keysUnder(toKey).compactMap { files[$0] }
            var moves = keysUnder(fromKey).compactMap { files[$0] }.map { PlannedMove(dirty: $0, newPath: to + $0.path.dropFirst(from.count)) }
            let source = folder ? nil : remotePresence(fromKey, cleanRev: cleanRev)
            let needsMove = folder || source!.onDropbox
            var drafts: [NamespaceDraft] = []
            var bases: [String: WriteBase] = [:]
            switch replacing {
            case .folder:
                drafts.append(NamespaceDraft(kind: .deleteFolder, path: to))
            case .file:
                let target = remotePresence(toKey, cleanRev: targetRev)
                if !needsMove, let index = moves.firstIndex(where: { Self.key($0.newPath) == toKey }) {
                    // Our file never reached Dropbox: its commit replaces theirs in one call, as an
                    // update of the rev we replace (or an add if Dropbox has nothing of it).
                    if moves[index].newRecord != nil {
                        moves[index].newRecord!.base = target.base
                        moves[index].newRecord!.sentHashes = target.hashes
                    } else {
                        bases[toKey] = target.base
                    }
                } else if target.onDropbox {
                    drafts.append(NamespaceDraft(kind: .delete, path: to, presence: target))
                }
            case nil:
                break
            }
            if needsMove { drafts.append(NamespaceDraft(kind: .move, path: from, target: to)) }
            let oldRows = replaced.compactMap(\.record).map(\.pathKey) + moves.compactMap { $0.dirty.record?.pathKey }
            let operations: [NamespaceOperation]
            do throws(Errno) {
                operations = try commitOperations(drafts, deleting: oldRows, saving: moves.compactMap(\.newRecord))
            } catch { condition.unlock(); throw error }
            discard(replaced)
            // Our earlier commits follow the files (a move keeps their revs); what was at `to` is gone.
            forgetOwnRevisions(under: toKey)
            moveOwnRevisions(from: fromKey, to: toKey)
            apply(moves, bases: bases)
            condition.unlock()
            showAndRelease(operations, show)
        }
    }

    // MARK: Internals (lock held unless noted)

    /// What Dropbox holds at `key` that is ours: the dirty file's base and lost-reply hashes, else
    /// the facade's rev (moved forward past our own commits it may not have seen yet).
    func remotePresence(_ key: String, cleanRev: String?) -> RemotePresence {
        if let dirty = files[key] {
            // A dirty version keeps the base it began with while commits of ours land before it
            // goes (its own commit rebases then): what Dropbox holds is past them.
            return RemotePresence(base: latestOwn(dirty.record?.base ?? dirty.newBase, key: key),
                                  hashes: dirty.record?.sentHashes ?? [])
        }
        let shown: WriteBase = if let cleanRev, !cleanRev.isEmpty { .revision(cleanRev) } else { .newFile }
        return RemotePresence(base: latestOwn(shown, key: key), hashes: [])
    }

    /// `base` moved past our own commits at `key`; a base that still says "nothing on Dropbox"
    /// while a commit of ours landed there (the chain's start forgotten) becomes that commit's
    /// rev, so an unlink or rename is never skipped over a file we put there. If someone changed
    /// it since, the operation's parent_rev check keeps theirs.
    private func latestOwn(_ base: WriteBase, key: String) -> WriteBase {
        let translated = translate(base, key: key)
        if translated == .newFile, let last = revisionsAfterCommit[key]?.last, !last.to.isEmpty { return .revision(last.to) }
        return translated
    }

    /// Writes the drafts as operations (with new sequences from the generation counter), and the
    /// row changes, in one transaction; the operations are queued but not released yet.
    private func commitOperations(_ drafts: [NamespaceDraft], deleting keys: [String], saving rows: [UploadRecord])
        throws(Errno) -> [NamespaceOperation] {
        guard !dead else { throw .io }
        var sequence = generationCounter
        let now = Date()
        let operations = drafts.map { draft -> NamespaceOperation in
            sequence += 1
            var operation = NamespaceOperation(sequence: sequence, kind: draft.kind, path: draft.path, target: draft.target,
                                               parentRev: draft.presence?.parentRev, ownHashes: draft.presence?.hashes ?? [],
                                               createdAt: now)
            operation.released = false
            return operation
        }
        guard !operations.isEmpty || !keys.isEmpty || !rows.isEmpty else { return [] }
        do {
            try journal.database.transaction(durable: false) {
                for key in keys { try journal.delete(pathKey: key) }
                for row in rows { try journal.save(row) }
                for operation in operations { try journal.save(operation) }
                if !operations.isEmpty { try journal.saveGeneration(sequence) }
            }
        } catch let error as SQLiteError {
            WriteBackLog.error("cannot journal \(drafts.map(\.path).joined(separator: ", ")): \(error)")
            throw Errno(error)
        } catch {
            throw .io
        }
        generationCounter = sequence
        for operation in operations { enqueue(operation) }
        return operations
    }

    func enqueue(_ operation: NamespaceOperation) {
        namespaceOperations.append(operation)
        for key in operation.keys { namespaceKeys.insert(key) }
    }

    /// Takes an operation out of the queue (memory only).
    func dequeue(_ sequence: UInt64) {
        guard let index = namespaceOperations.firstIndex(where: { $0.sequence == sequence }) else { return }
        for key in namespaceOperations[index].keys { namespaceKeys.remove(key) }
        namespaceOperations.remove(at: index)
        condition.broadcast()
    }

    /// Runs the facade's `show` (no lock held), then lets the operations be sent.
    private func showAndRelease(_ operations: [NamespaceOperation], _ show: ([UInt64]) -> Void) {
        show(operations.map(\.sequence))
        guard !operations.isEmpty else { return }
        condition.lock(); defer { condition.unlock() }
        let released = Set(operations.map(\.sequence))
        for index in namespaceOperations.indices where released.contains(namespaceOperations[index].sequence) {
            namespaceOperations[index].released = true
        }
        condition.broadcast()
    }

    /// Whether an upload of `key` must wait for a queued operation (lock held).
    func waitsForNamespace(_ key: String) -> Bool {
        // The root ("") is above every path: any queued operation touches it.
        !namespaceKeys.isEmpty && (key.isEmpty || namespaceKeys.overlaps(key))
    }

    // MARK: For the facade

    /// The queued operations, oldest first: the facade shows them on the mount after a restart.
    public func queuedNamespaceOperations() -> [NamespaceOperationSnapshot] {
        condition.lock(); defer { condition.unlock() }
        return namespaceOperations.map {
            NamespaceOperationSnapshot(sequence: $0.sequence, kind: $0.kind, path: $0.path, target: $0.target)
        }
    }

    /// Lets the operations read back from the journal be sent (with `holdRecoveredNamespaceOperations`,
    /// they wait until the facade has shown them on the mount).
    public func releaseRecoveredNamespaceOperations() {
        condition.lock(); defer { condition.unlock() }
        namespaceHeld = false
        condition.broadcast()
    }

    /// Waits until no queued operation touches `paths` (at, above or below them), or `deadline`:
    /// for a case-only rename, which goes to Dropbox at once (CaseOnlyRename.swift). False at the
    /// deadline.
    public func waitForNamespaceOperations(touching paths: [String], until deadline: Date) -> Bool {
        let keys = paths.map(Self.key)
        condition.lock(); defer { condition.unlock() }
        if namespaceHeld { namespaceHeld = false; condition.broadcast() }
        while keys.contains(where: waitsForNamespace) {
            if !condition.wait(until: min(deadline, waitersDeadline)) { return !keys.contains(where: waitsForNamespace) }
        }
        return true
    }

    /// Why Dropbox could not be reached by the latest attempt of a queued operation at or under
    /// (or above) one of `paths`, if one failed so: a command that would wait for that operation
    /// says so at once rather than wait. nil if none was tried yet or none failed that way.
    public func unreachableReason(forOperationsTouching paths: [String]) -> String? {
        var asked = PathOverlapSet()
        for path in paths { asked.insert(Self.key(path)) }
        condition.lock(); defer { condition.unlock() }
        return namespaceOperations.first { operation in
            operation.unreachable != nil && operation.keys.contains(where: asked.overlaps)
        }?.unreachable
    }

    /// Status lines for queued operations, as `PendingUpload`s with `operation` set.
    func namespaceReports() -> [PendingUpload] {
        namespaceOperations.map { operation in
            var report = PendingUpload(path: operation.path, size: 0, generation: operation.sequence,
                                       state: operation.hardError != nil ? .failed : .pending, openForWriting: false,
                                       attempts: operation.attempts, lastError: operation.lastError)
            report.operation = operation.summary
            report.queuedAt = operation.createdAt
            return report
        }
    }
}
