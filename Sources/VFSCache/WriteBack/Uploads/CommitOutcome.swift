/// What happens around each transfer: preparing a job (content hash, post-crash checks), keeping
/// its journal row current, and acting on the outcome of its commit: confirmed (drop the row, then
/// the staging file), conflict (check whether it is really ours that landed, else keep both as a
/// conflicted copy), or failure (back off, restart the session, or hold and report).
///
/// Every job ends in exactly one call to `finish`, which clears its in-flight marker.
import Foundation
import Synchronization

extension WriteBackEngine {
    /// The commit of a job: its path (or its conflicted copy's), mode and content hash.
    func commit(for job: UploadJob) -> RemoteCommit {
        RemoteCommit(path: job.record.commitPath ?? job.record.path, mode: job.record.base.mode,
                     clientModified: job.record.clientModified, contentHash: job.record.contentHash)
    }

    /// A progress callback that records bytes done and stops the transfer once cancelled.
    func progress(for job: UploadJob, base: UInt64 = 0) -> RemoteProgress {
        let active = job.active
        return { [self] done, _ in
            let previous = active.done.exchange(base + done, ordering: .relaxed)
            if base + done > previous { bytesSent.add(base + done - previous, ordering: .relaxed) }
            return !active.cancelled.load(ordering: .relaxed) && !stopFlag.load(ordering: .relaxed)
        }
    }

    /// Hashes the staging file if needed. After a restart, also checks that the bytes still match
    /// the journal (else the session is dropped). Whenever a commit was sent and its outcome never
    /// heard (a crash, or a request that timed out or lost its connection: the row stays
    /// "committing"), asks whether it landed: returns that entry if so. Without this check the
    /// retry would find the session gone and send the whole file again.
    func prepare(_ job: inout UploadJob) throws(RemoteError) -> RemoteEntry? {
        guard job.record.contentHash == nil || job.verifyContent else {
            return try landedEarlier(job, hash: job.record.contentHash!)
        }
        let hash: String
        do {
            // After a restart nothing hashed in memory exists; otherwise only the tail after the
            // blocks hashed while the file was written is read here.
            let digests = job.verifyContent ? nil : takePrefixDigests(job)
            hash = try contentHash(of: job.file, size: job.record.size, digestsOfFirstBlocks: digests ?? [])
        } catch {
            throw RemoteError.other("cannot read staging file of \(job.record.path): \(error)")
        }
        if let old = job.record.contentHash, old != hash {
            job.record.sessionID = nil
            job.record.sessionClosed = false
            job.record.sessionConcurrent = false
        }
        job.record.contentHash = hash
        if let entry = try landedEarlier(job, hash: hash) { return entry }
        // A small file's hash reaches the journal with its "committing" mark (one transaction per
        // batch); a large file's now, since its session's chunks are only valid for these bytes.
        if job.active.large || job.verifyContent {
            guard persist(job, resetChunks: job.record.sessionID == nil, verified: job.verifyContent) else { throw .cancelled }
        }
        return nil
    }

    /// The remote entry if a commit of these bytes was sent earlier and landed unheard.
    private func landedEarlier(_ job: UploadJob, hash: String) throws(RemoteError) -> RemoteEntry? {
        guard job.record.state == .committing else { return nil }
        let target = job.record.commitPath ?? job.record.path
        if let entry = try remote.metadata(path: target), !entry.isFolder, entry.contentHash == hash {
            WriteBackLog.info("\(job.record.path): a commit sent earlier landed unheard; it is ours")
            return entry
        }
        return nil
    }

    /// Saves the job's copy of its row if the job is still the current one. False means stale
    /// (cancelled, superseded, removed, engine stopped): the job must stop without committing.
    func persist(_ job: UploadJob, resetChunks: Bool = false, verified: Bool = false) -> Bool {
        condition.lock(); defer { condition.unlock() }
        guard isCurrent(job) else { return false }
        do {
            try journal.database.transaction {
                if resetChunks { try journal.forgetChunks(staging: job.record.staging) }
                try journal.save(job.record)
            }
        } catch {
            WriteBackLog.error("cannot update the journal for \(job.record.path): \(error)")
            return false
        }
        let dirty = files[job.key]!
        dirty.record = job.record
        if verified { dirty.verifyContent = false }
        return true
    }

    /// Marks jobs as committing in one transaction, just before their commit request; returns the
    /// ones still current. The others are finished here.
    func markCommitting(_ jobs: [UploadJob]) -> [UploadJob] {
        condition.lock(); defer { condition.unlock() }
        var live: [UploadJob] = []
        for var job in jobs {
            guard isCurrent(job) else { finishLocked(job); continue }
            job.record.state = .committing
            // Remember what we send: if the reply is lost, a later conflict may be our own bytes.
            if let hash = job.record.contentHash, !job.record.sentHashes.contains(hash) {
                job.record.sentHashes.append(hash)
                if job.record.sentHashes.count > 8 { job.record.sentHashes.removeFirst() }
            }
            live.append(job)
        }
        // Someone waits for all of these (fsync, sync): durability comes from Dropbox.
        let durable = !live.allSatisfy { job in files[job.key].map { isUrgent($0, generation: job.record.generation) } ?? false }
        do {
            try journal.database.transaction(durable: durable) { for job in live { try journal.save(job.record) } }
        } catch {
            WriteBackLog.error("cannot update the journal before a commit: \(error)")
            for job in live { finishLocked(job) }
            return []
        }
        for job in live { files[job.key]!.record = job.record }
        return live
    }

    func isCurrent(_ job: UploadJob) -> Bool {
        guard !dead, !stopped, !job.active.cancelled.load(ordering: .relaxed),
              let dirty = files[job.key], dirty.active === job.active, !dirty.writing else { return false }
        return dirty.record?.generation == job.record.generation
    }

    /// Acts on the outcome of a commit (or on a failure before it). Called without the lock.
    func complete(_ job: UploadJob, _ result: Result<RemoteEntry, RemoteError>) {
        switch result {
        case .success(let entry):
            var landedHash = entry.contentHash
            if landedHash == nil { landedHash = ((try? remote.metadata(path: entry.pathDisplay)) ?? nil)?.contentHash }
            if landedHash == job.record.contentHash {
                committed(job, entry)
            } else {
                // Dropbox committed other bytes than the file's (it checks no whole-file hash at
                // finish): stale chunks in the session, or a stale hash of ours. That rev is ours:
                // the retry hashes the file again and, in a new session, replaces it.
                WriteBackLog.error("\(job.record.path): the bytes committed (rev \(entry.rev ?? "?"), hash \(landedHash ?? "missing")) are not the file's (\(job.record.contentHash ?? "?")); uploading it again over them")
                rebaseOnWrongCommit(job, rev: entry.rev)
                failed(job, .other("content hash after commit is \(landedHash ?? "missing"), expected \(job.record.contentHash ?? "?")"))
            }
        case .failure(.conflict(let reason)):
            if job.active.cancelled.load(ordering: .relaxed) { finish(job); return }
            // A commit whose reply was lost may have landed: if the remote now holds exactly our
            // bytes, that is our commit, not a conflict.
            let target = job.record.commitPath ?? job.record.path
            let current: RemoteEntry?
            do { current = try remote.metadata(path: target) } catch {
                failed(job, error)
                return
            }
            if let current, !current.isFolder, current.contentHash == job.record.contentHash {
                committed(job, current)
                return
            }
            // Or an earlier version of ours whose reply was lost is what changed the rev: then the
            // remote is ours, and this version simply replaces it.
            if let current, !current.isFolder, let hash = current.contentHash, let rev = current.rev,
               rebaseOnOwnEarlierCommit(job, hash: hash, rev: rev) {
                return
            }
            // Nothing there: the file we edited was deleted elsewhere. Dropbox conflicts anyway
            // (strict_conflict, files.stone CommitInfo), but our edit wins over the delete: the
            // file comes back under its name (docs/SEMANTICS.md, "Conflicts").
            if current == nil, recreateDeletedTarget(job) { return }
            conflicted(job, reason: reason)
        case .failure(.sessionGone(let id)) where job.record.state == .committing:
            // The client retried a commit whose first attempt landed unheard (a timeout, a lost
            // connection): the retry finds the session consumed. If the remote holds our bytes,
            // that was our commit; else start over.
            let target = job.record.commitPath ?? job.record.path
            if let current = (try? remote.metadata(path: target)) ?? nil, !current.isFolder,
               current.contentHash == job.record.contentHash {
                WriteBackLog.info("\(job.record.path): a commit retried after a lost reply had landed; it is ours")
                committed(job, current)
                return
            }
            failed(job, .sessionGone(id))
        case .failure(let error):
            failed(job, error)
        }
    }

    private func committed(_ job: UploadJob, _ entry: RemoteEntry) {
        condition.lock(); defer { condition.unlock() }
        defer { finishLocked(job) }
        guard !dead else { return }
        offline = false
        let copyPath = job.record.commitPath
        if copyPath == nil {
            var steps = revisionsAfterCommit[job.key] ?? []
            steps.append((from: job.record.base, to: entry.rev ?? ""))
            revisionsAfterCommit[job.key] = Array(steps.suffix(4))
            if revisionsAfterCommit.count > 10_000 { revisionsAfterCommit = [job.key: steps] }
        }
        let now = configuration.now()
        if let dirty = files[job.key] {
            dirty.committedGeneration = max(dirty.committedGeneration, job.record.generation)
            dirty.lastError = nil
            dirty.hardError = nil
            if var record = dirty.record, record.generation == job.record.generation, !dirty.writing {
                // The latest bytes are on Dropbox: drop the row, then the staging file. The row
                // need not reach the disk before the staging file goes: a row that comes back
                // after a crash finds its staging file missing and is dropped, or finds our bytes
                // on Dropbox ("committing").
                do {
                    try journal.database.transaction(durable: false) {
                        try journal.delete(pathKey: job.key)
                        try journal.forgetChunks(staging: record.staging)
                        if let copyPath { try journal.recordConflict(path: record.path, copyPath: copyPath, at: now) }
                    }
                    if copyPath == nil {
                        // The staging file stays, without a row (its bytes are on Dropbox), until
                        // the facade has shown this commit in its tree and the kernel no longer
                        // serves opens from it (StagingRetention.swift): a writer that opens in
                        // between must find these bytes, not fill from the rev the tree still
                        // shows. Not after a conflict: the path shows the other version now, and
                        // ours is the conflicted copy.
                        dirty.record = nil
                        dirty.newBase = .revision(entry.rev ?? "")
                        dirty.retainedCommit = RetainedCommit(generation: job.record.generation, entry: entry,
                                                              shownByFacade: false, servedByKernel: dirty.kernelOpens > 0)
                    } else {
                        files[job.key] = nil
                        stagingArea.remove(name: record.staging)
                        // A writer must not start from our bytes before the tree shows theirs.
                        conflictsNotShown[job.key] = job.record.generation
                    }
                    retryFailedClosesSoon()
                } catch {
                    // Keep everything; the next attempt finds our bytes on Dropbox and ends here again.
                    WriteBackLog.error("committed \(record.path) but cannot update the journal: \(error)")
                    record.state = .committing
                    dirty.record = record
                    dirty.notBefore = Date().addingTimeInterval(configuration.retryBaseDelay)
                }
            } else if var record = dirty.record {
                // Newer bytes are waiting (or being written): they now replace our own commit.
                record.base = .revision(entry.rev ?? "")
                if record.generation == job.record.generation {
                    record.sessionID = nil; record.sessionClosed = false; record.sessionConcurrent = false
                }
                dirty.record = record
                try? journal.save(record)
            }
        }
        if let copyPath {
            WriteBackLog.warning("conflict: \(job.record.path) was changed elsewhere; our version is kept as \(copyPath)")
            emit(.conflicted(path: job.record.path, copyPath: copyPath, generation: job.record.generation, entry: entry))
        } else {
            WriteBackLog.debug("committed \(job.record.path) rev \(entry.rev ?? "?")")
            emit(.committed(path: job.record.path, generation: job.record.generation, entry: entry))
        }
    }

    /// If the remote version (`hash`, `rev`) is our own (bytes we sent without hearing the outcome,
    /// or a rev our own commit made), re-queues the job based on `rev` (lock taken here) and
    /// returns true.
    private func rebaseOnOwnEarlierCommit(_ job: UploadJob, hash: String, rev: String) -> Bool {
        condition.lock(); defer { condition.unlock() }
        // Ours: bytes we sent and never heard back about, or a rev one of our own commits made
        // (the base this job was given predates that commit).
        let ownRevision = revisionsAfterCommit[job.key]?.contains { $0.to == rev } ?? false
        guard isCurrent(job), let dirty = files[job.key], var record = dirty.record,
              record.sentHashes.contains(hash) || ownRevision, record.base != .revision(rev) else { return false }
        defer { finishLocked(job) }
        WriteBackLog.info("\(record.path): an earlier upload of ours landed unseen (rev \(rev)); committing over it")
        record.base = .revision(rev)
        record.state = .pending
        dirty.record = record
        dirty.notBefore = .distantPast
        do { try journal.save(record) } catch { WriteBackLog.error("cannot update the journal for \(record.path): \(error)") }
        return true
    }

    /// Makes our own commit of the wrong bytes the base of the next attempt, which hashes the file
    /// again (`failed` journals it).
    private func rebaseOnWrongCommit(_ job: UploadJob, rev: String?) {
        condition.lock(); defer { condition.unlock() }
        guard isCurrent(job), let dirty = files[job.key], var record = dirty.record else { return }
        record.contentHash = nil
        if let rev, record.commitPath == nil { record.base = .revision(rev) }
        dirty.record = record
    }

    /// An `update` of a file that is gone: re-queues the job as a new file at its own path (lock
    /// taken here) and returns true. Only once per path: if it conflicts again, something new is
    /// there, and that is an ordinary conflict.
    private func recreateDeletedTarget(_ job: UploadJob) -> Bool {
        condition.lock(); defer { condition.unlock() }
        guard isCurrent(job), let dirty = files[job.key], var record = dirty.record, record.commitPath == nil,
              case .revision = record.base else { return false }
        defer { finishLocked(job) }
        WriteBackLog.info("\(record.path) was deleted on Dropbox while it was edited here; it comes back with our version")
        record.base = .newFile
        record.state = .pending
        dirty.record = record
        dirty.notBefore = .distantPast
        do { try journal.save(record) } catch { WriteBackLog.error("cannot update the journal for \(record.path): \(error)") }
        return true
    }

    private func conflicted(_ job: UploadJob, reason: String) {
        condition.lock(); defer { condition.unlock() }
        defer { finishLocked(job) }
        guard isCurrent(job), let dirty = files[job.key], var record = dirty.record else { return }
        if dirty.conflictIndex >= 20 {
            dirty.hardError = .conflict(reason)
            dirty.failedAt = Date()
            record.state = .failed
            record.lastError = "no free conflicted-copy name (\(reason))"
            dirty.notBefore = Date().addingTimeInterval(configuration.hardFailureRetryDelay)
        } else {
            let copy = ConflictNaming.copyPath(for: record.path, date: configuration.now(),
                                               timeZone: configuration.timeZone, index: dirty.conflictIndex)
            dirty.conflictIndex += 1
            let target = record.commitPath ?? record.path
            WriteBackLog.warning("conflict on \(target)\(reason == target ? "" : " (\(reason))"): committing ours as \(copy)")
            record.commitPath = copy
            record.base = .newFile
            record.state = .pending
            dirty.notBefore = .distantPast
        }
        dirty.record = record
        do { try journal.save(record) } catch { WriteBackLog.error("cannot update the journal for \(record.path): \(error)") }
    }

    func failed(_ job: UploadJob, _ error: RemoteError) {
        condition.lock(); defer { condition.unlock() }
        defer { finishLocked(job) }
        if job.active.cancelled.load(ordering: .relaxed) || dead { return }
        guard let dirty = files[job.key], var record = dirty.record, record.generation == job.record.generation else { return }
        let now = Date()
        record.attempts += 1
        // Status and sync show it next to the path: the sentence without it.
        let told = error.description(about: record.path)
        record.lastError = told
        dirty.lastError = error
        switch UploadRetryPolicy.action(for: error, attempt: record.attempts, configuration: configuration) {
        case .retry(let delay, let pauseAll, let resetSession):
            dirty.notBefore = now.addingTimeInterval(delay)
            if pauseAll {
                pausedUntil = max(pausedUntil, now.addingTimeInterval(delay))
                if case .unavailable = error { offline = true }
            }
            if resetSession {
                record.sessionID = nil; record.sessionClosed = false; record.sessionConcurrent = false
                try? journal.forgetChunks(staging: record.staging)
            }
            // A commit whose outcome is unknown (timed out, connection lost) stays "committing":
            // the next attempt first asks Dropbox whether it landed (prepare).
            let outcomeUnknown = record.state == .committing && !resetSession
            if !outcomeUnknown { record.state = record.sessionID == nil ? .pending : .uploading }
        case .hold, .conflict:
            dirty.hardError = error
            dirty.failedAt = now
            dirty.notBefore = now.addingTimeInterval(configuration.hardFailureRetryDelay)
            record.state = .failed
        case .refuse:
            // Until the file is renamed, written again or the next mount: apply() and close()
            // reset notBefore.
            dirty.hardError = error
            dirty.notBefore = .distantFuture
            record.state = .refused
        }
        dirty.record = record
        do { try journal.save(record) } catch { WriteBackLog.error("cannot update the journal for \(record.path): \(error)") }
        recentErrors.append(UploadErrorReport(path: record.path, message: told, at: now))
        if recentErrors.count > 50 { recentErrors.removeFirst(recentErrors.count - 50) }
        if record.state == .refused {
            WriteBackLog.warning("cannot upload \(record.path): \(told); the bytes are kept and not retried: move the file to a writable folder, or delete it")
        } else {
            let level = dirty.hardError != nil ? "cannot upload" : "will retry"
            WriteBackLog.warning("\(level) \(record.path) (attempt \(record.attempts)): \(told)")
        }
        emit(.failed(path: record.path, generation: record.generation, error: error, willRetry: !stopped))
    }

    func finish(_ job: UploadJob) {
        condition.lock(); defer { condition.unlock() }
        finishLocked(job)
    }

    /// Clears the job's in-flight marker (lock held) and wakes the dispatcher and waiters.
    func finishLocked(_ job: UploadJob) {
        guard !job.active.finished.exchange(true, ordering: .relaxed) else { return }
        if let dirty = files[job.key], dirty.active === job.active {
            dirty.active = nil
        } else if let dirty = files.values.first(where: { $0.active === job.active }) {
            // Moved under another key meanwhile: clear it wherever it is, or it would block forever.
            dirty.active = nil
        }
        if job.active.large { activeLargeUploads -= 1 }
        condition.broadcast()
    }

    func emit(_ event: WriteBackEvent) {
        let onEvent = self.onEvent
        eventQueue.async { [self] in
            onEvent(event)
            // A handler that did not say so itself (an engine without a facade) has shown it now.
            switch event {
            case .committed(let path, let generation, _): commitShown(path: path, generation: generation)
            case .conflicted(let path, _, let generation, _): conflictShown(path: path, generation: generation)
            default: break
            }
        }
    }
}
