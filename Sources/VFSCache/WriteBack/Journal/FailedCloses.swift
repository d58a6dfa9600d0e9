/// Closes that could not be journaled. A close whose fsync or journal transaction fails (a full
/// cache disk: SQLite cannot grow its WAL, the staging file cannot be synced) tells the writer
/// (ENOSPC from close), but the file's writers are done with it all the same: its bytes are what
/// they left. So the engine keeps the file as closed and "held": never uploaded, since its bytes
/// are not journaled (not crash-safe), and reported as failed by `status`, `waitForAll` (so
/// `dbxfs sync` never says everything is on Dropbox) and flush; it journals the close again
/// after the hard-failure delay, whenever an upload or an unlink frees space in the staging
/// area, when `dbxfs sync` asks (`waitForAll(retryingHeld:)`) and at fsync (`retryClose`). Once
/// journaled, it is uploaded like any closed file: as the writer left it. A new write clears it
/// (`beginWrite`); an unlink drops it. The daemon exiting before then loses it, like any bytes
/// whose close never succeeded (docs/SEMANTICS.md, "Writing").
import Foundation

extension WriteBackEngine {
    /// A close of `dirty` failed with `error` (lock held): keep it closed and held, to retry.
    func noteCloseFailure(_ dirty: DirtyFile, _ error: Errno, clientModified: Date?, retrying: Bool) {
        guard !dead, files[Self.key(dirty.path)] === dirty else { return }
        // A retry that lost a race with a successful close, or with a new write, changes nothing.
        if retrying && (dirty.closeFailure == nil || dirty.writing) { return }
        let now = Date()
        if dirty.closeFailure == nil {
            WriteBackLog.error("\(dirty.path): its close cannot be journaled (\(error)); it is kept as closed, not uploaded, and retried")
            recentErrors.append(UploadErrorReport(path: dirty.path, message: "cannot journal its close: \(error)", at: now))
            if recentErrors.count > 50 { recentErrors.removeFirst(recentErrors.count - 50) }
        }
        dirty.writing = false
        if dirty.closedSince == nil { dirty.closedSince = now }
        dirty.closeFailure = error
        dirty.closeModified = clientModified
        dirty.failedAt = now
        dirty.notBefore = now.addingTimeInterval(configuration.hardFailureRetryDelay)
        closesToRetry = true
        condition.broadcast()
    }

    /// For fsync: journals now the close of `path` that could not be journaled, and returns its
    /// generation; nil if there is none. Throws if it still cannot be journaled. `staging`: the
    /// caller's staging file, followed wherever a rename from another thread moved it (by path,
    /// fsync found no held close there and went on to report success).
    public func retryClose(path: String, staging: StagingFile? = nil) throws(Errno) -> UInt64? {
        condition.lock()
        let dirty = dirtyFile(path: path, staging: staging)
        condition.unlock()
        return try retryClose(dirty)
    }

    func retryClose(key: String) throws(Errno) -> UInt64? {
        condition.lock()
        let dirty = files[key]
        condition.unlock()
        return try retryClose(dirty)
    }

    private func retryClose(_ dirty: DirtyFile?) throws(Errno) -> UInt64? {
        condition.lock()
        let held = dirty.flatMap { $0.closeFailure != nil && !$0.writing ? $0 : nil }
        let modified = held?.closeModified
        condition.unlock()
        guard let held else { return nil }
        return try journalClose(held, clientModified: modified, retrying: true)
    }

    /// Starts the retries that are due, off the dispatcher (lock held).
    func retryFailedCloses(now: Date, wake: inout Date) {
        guard closesToRetry else { return }
        for (key, dirty) in files where dirty.closeFailure != nil && !dirty.writing && !isHeld(key) {
            guard dirty.notBefore <= now else {
                wake = min(wake, dirty.notBefore)
                continue
            }
            // Until this retry sets the next one. Renamed meanwhile, it is found under its new
            // key by the next pass (a rename makes it due at once).
            dirty.notBefore = .distantFuture
            jobPool.submit { _ = try? self.retryClose(key: key) }
        }
    }

    /// At unmount: one last try for every held close, which is lost otherwise (lock not held).
    func retryHeldClosesBeforeExit() {
        condition.lock()
        let keys = files.filter { $0.value.closeFailure != nil && !$0.value.writing }.map(\.key)
        condition.unlock()
        for key in keys { _ = try? retryClose(key: key) }
    }

    /// Space was freed in the staging area (lock held): held closes are retried at once.
    func retryFailedClosesSoon() {
        guard closesToRetry else { return }
        var any = false
        for dirty in files.values where dirty.closeFailure != nil {
            any = true
            dirty.notBefore = .distantPast
        }
        closesToRetry = any
        condition.broadcast()
    }
}
