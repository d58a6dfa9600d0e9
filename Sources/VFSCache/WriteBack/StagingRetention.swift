/// Staging files kept after their commit. The engine learns of a commit before the facade's
/// tree shows it (the event is delivered on the engine's event queue), so a committed staging
/// file is kept, without a journal row, until the facade has shown the commit (`commitShown`):
/// an open for writing in between finds these bytes and writes on, where it would otherwise fill
/// a new staging file from the rev the tree still shows (the bytes before the commit, or with the
/// wrong size an EIO). Then the bytes are handed over to the disk cache as the new rev's copy.
///
/// Staging files the kernel writes and reads by itself (FUSE passthrough, docs/WRITEBACK.md
/// "Passthrough writes") are also kept: the facade names such an open's staging file as the
/// kernel's backing file, and the kernel then requires every later open of that inode, until the
/// last one closes, to use the same file. So the engine must not swap the file for a new one
/// under those opens: a commit that lands while any is left keeps the staging file, the next write
/// of the path reuses it, and it goes with the last such open.
///
/// While such opens are left, the file's disk writeback is started behind the kernel's writes
/// (StagingWriteback.swift), so the fdatasync at close waits for the tail only.
///
/// The staging budget (how many bytes may wait for their upload before new opens for writing stop
/// being handed to the kernel, and writes through the daemon wait) is StagingBudget.swift.
import Foundation

extension WriteBackEngine {
    /// An open the kernel serves from `file`, `path`'s staging file, began. False if the engine
    /// no longer has that file: the facade then serves the open itself. Found by identity, not by
    /// `path`: a rename from another thread may have moved it since the facade read the path, and
    /// an open not counted let a commit hand the file the kernel writes to the disk cache
    /// (`aFileRenamedJustBeforeTheKernelsOpenIsRetainedUnderItsNewName`).
    public func retainStaging(path: String, file: StagingFile) -> Bool {
        condition.lock(); defer { condition.unlock() }
        guard let dirty = dirtyFile(path: path, staging: file), dirty.file === file else { return false }
        dirty.kernelOpens += 1
        dirty.retainedCommit?.servedByKernel = true
        // The daemon will not see this open's writes: what it hashed or streamed from the
        // facade's writes can no longer be trusted (a kernel stream checks its own chunks).
        dirty.dropPrefixHash()
        if let stream = dirty.streaming, !stream.fromKernel, !stream.handedOver { stream.abandon() }
        stagingWriteback.watch(file)
        return true
    }

    /// An open counted by `retainStaging` ended (`file`: its staging file, whatever the path is
    /// now). The last one lets a file committed meanwhile go, and announces that commit again so
    /// the facade shows the file as on Dropbox.
    public func releaseStaging(_ file: StagingFile) {
        condition.lock(); defer { condition.unlock() }
        // Also for a file the engine dropped meanwhile (a conflict): the kernel may still write it.
        stagingWriteback.unwatch(file)
        guard let (key, dirty) = files.first(where: { $0.value.file === file }) else { return }
        dirty.kernelOpens = max(0, dirty.kernelOpens - 1)
        if let commit = letGoIfUnused(key, dirty) {
            emit(.committed(path: dirty.path, generation: commit.generation, entry: commit.entry))
        }
    }

    /// The facade's tree shows the commit of `generation` of `path`: the staging file kept for it
    /// may go (handed over to the disk cache), unless a writer took it over or the kernel still
    /// serves it. Called by the facade's handler of the event before it adopts the bytes, and
    /// after every handler (a second call does nothing).
    public func commitShown(path: String, generation: UInt64) {
        condition.lock(); defer { condition.unlock() }
        let key = Self.key(path)
        guard let dirty = files[key], var commit = dirty.retainedCommit, commit.generation == generation,
              !commit.shownByFacade else { return }
        commit.shownByFacade = true
        dirty.retainedCommit = commit
        _ = letGoIfUnused(key, dirty)
    }

    /// The facade's tree shows the conflict of `generation` of `path` (the path shows the other
    /// version, ours is the conflicted copy): writers waiting in `waitUntilConflictShown` go on.
    public func conflictShown(path: String, generation: UInt64) {
        condition.lock(); defer { condition.unlock() }
        let key = Self.key(path)
        guard conflictsNotShown[key] == generation else { return }
        conflictsNotShown[key] = nil
        condition.broadcast()
    }

    /// Waits (up to `timeout`) until the facade shows a conflict the engine committed at `path`
    /// as a conflicted copy. After such a commit the engine no longer holds the path's bytes,
    /// while the tree still shows our version: a writer that began in between would fill its
    /// staging file from our old bytes or the old rev, and make a second conflicted copy or an EIO.
    /// Returns at once if there is none (the usual case). Call without the facade's file lock:
    /// the event's handler takes it.
    public func waitUntilConflictShown(path: String, timeout: TimeInterval = 10) {
        let key = Self.key(path)
        let deadline = Date().addingTimeInterval(timeout)
        condition.lock(); defer { condition.unlock() }
        while conflictsNotShown[key] != nil, !stopped, condition.wait(until: deadline) {}
    }

    /// Whether `rev` of `path` was made by one of our own recent commits (the last four per
    /// path): then another handle of the mount wrote it, not another client.
    public func isOwnCommit(path: String, rev: String) -> Bool {
        condition.lock(); defer { condition.unlock() }
        return revisionsAfterCommit[Self.key(path)]?.contains { $0.to == rev } ?? false
    }

    /// True while a conflict at `path` waits for the facade to show it (see above).
    public func hasConflictNotShown(path: String) -> Bool {
        condition.lock(); defer { condition.unlock() }
        return conflictsNotShown[Self.key(path)] != nil
    }

    /// True if `path` has bytes the commits shown so far do not account for: a writer, a close
    /// not on Dropbox yet, or a staging file the kernel still serves. A staging file kept only
    /// until the facade shows its commit does not count (the facade asks while showing it).
    /// `generation`: the commit being shown. A later commit the engine holds counts as bytes the
    /// shown one does not account for: its own event, still queued behind this one, shows it
    /// (without this, the older commit's size showed until then:
    /// `aCommitsEventHandledAfterALaterCommitDoesNotShowTheOlderSize`).
    public func keepsLocalBytes(path: String, showing generation: UInt64) -> Bool {
        condition.lock(); defer { condition.unlock() }
        guard let dirty = files[Self.key(path)] else { return false }
        guard let retained = dirty.retainedCommit, retained.generation <= generation else { return true }
        return dirty.kernelOpens > 0 || dirty.writing || dirty.record != nil || dirty.closeFailure != nil
    }

    /// Drops a committed staging file nothing needs any more (lock held) and returns its commit.
    /// Its bytes are the commit's (a writer would have cleared `retainedCommit`), so they are
    /// handed over for the disk cache rather than deleted, and reading them back costs no download
    /// (docs/VFSCACHE.md). Not if the kernel served the file after the commit: what it wrote
    /// without a close the daemon saw is not known to match the commit's content hash.
    private func letGoIfUnused(_ key: String, _ dirty: DirtyFile) -> RetainedCommit? {
        guard dirty.kernelOpens == 0, !dirty.writing, dirty.record == nil, dirty.closeFailure == nil,
              let commit = dirty.retainedCommit, commit.shownByFacade else { return nil }
        files[key] = nil
        dirty.letGo = true
        if configuration.handOverCommittedBytes, !commit.servedByKernel {
            _ = stagingArea.handOver(name: dirty.file.name, generation: commit.generation)
        } else {
            stagingArea.remove(name: dirty.file.name)
        }
        return commit
    }
}

/// The commit of a staging file kept after it (see above).
struct RetainedCommit {
    let generation: UInt64
    let entry: RemoteEntry
    /// The facade's handler of the commit event has run (its tree shows the new rev).
    var shownByFacade: Bool
    /// The kernel served an open from the file after the commit.
    var servedByKernel: Bool
}
