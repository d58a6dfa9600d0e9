/// Small files: a lone one goes as a single `upload` call; a burst (tar x, git checkout) is
/// gathered in a `BatchWindow`, each file is sent into its own upload session (one
/// `upload_session/start` with the bytes and `close`) as soon as the window holds two, and the
/// whole window is committed with one `finishBatch` per 1000 files.
/// That keeps a 1000-file burst at a handful of commit calls, which is what Dropbox's
/// too_many_write_operations limit counts.
///
/// The window closes once no file arrived for `gatherDelay`, after `maxGatherTime`, or at
/// `maxBatchEntries` files. Small-file sessions are not journaled (re-sending a small file is
/// cheaper than an fsync per file); only the "committing" mark before `finishBatch` is.
import Foundation
import Synchronization

/// Files gathered for one batch commit. Only touched with the engine's lock held.
final class BatchWindow: @unchecked Sendable {
    // @unchecked: every property is only accessed with the owning engine's `condition` held.
    var jobs: [UploadJob] = []
    var sessions: [String: RemoteUploadedSession] = [:]
    var failures: [String: RemoteError] = [:]
    let opened: Date
    var lastArrival: Date
    /// Session uploads have begun (the window holds, or held, at least two files).
    var started = false
    var sealed = false
    var outstanding = 0

    init(now: Date) { opened = now; lastArrival = now }
}

extension WriteBackEngine {
    /// Adds a started small job to the open window (lock held).
    func addToWindow(_ job: UploadJob, now: Date) {
        let current = window ?? BatchWindow(now: now)
        window = current
        current.jobs.append(job)
        current.lastArrival = now
        // Once started, every newcomer is sent at once, even if earlier files left the window
        // (committed before a crash) and it holds a single file again.
        if current.started {
            startSessionUpload(job, in: current)
        } else if current.jobs.count >= 2 {
            current.started = true
            for queued in current.jobs { startSessionUpload(queued, in: current) }
        }
        if current.jobs.count >= configuration.maxBatchEntries { seal(current) }
    }

    /// Closes a window to new files (lock held): a lone file goes as one `upload`; otherwise the
    /// batch is committed as soon as its last session upload is done.
    func seal(_ target: BatchWindow) {
        guard !target.sealed else { return }
        target.sealed = true
        if window === target { window = nil }
        if !target.started {
            for job in target.jobs { jobPool.submit { self.runSingleUpload(job) } }
        } else if target.outstanding == 0 {
            jobPool.submit { self.commitBatch(target) }
        }
    }

    private func startSessionUpload(_ job: UploadJob, in target: BatchWindow) {
        target.outstanding += 1
        jobPool.submit { self.uploadToSession(job, in: target) }
    }

    /// Sends one small file into its own (closed) session, ready for `finishBatch`.
    private func uploadToSession(_ job: UploadJob, in target: BatchWindow) {
        var job = job
        var outcome: Result<RemoteUploadedSession, RemoteError>
        do throws(RemoteError) {
            if let landed = try prepare(&job) {
                // Committed before a crash: nothing to send.
                condition.lock()
                target.jobs.removeAll { $0.key == job.key }
                target.outstanding -= 1
                let ready = target.sealed && target.outstanding == 0
                condition.unlock()
                complete(job, .success(landed))
                if ready { commitBatch(target) }
                return
            }
            guard !job.active.cancelled.load(ordering: .relaxed) else { throw .cancelled }
            // One call: the session starts with the bytes and closed.
            let id = try remote.uploadClosedSession(file: job.file.url, length: job.record.size, progress: progress(for: job))
            outcome = .success(RemoteUploadedSession(sessionID: id, length: job.record.size))
        } catch {
            outcome = .failure(error)
        }
        condition.lock()
        if let index = target.jobs.firstIndex(where: { $0.key == job.key }) { target.jobs[index] = job }
        switch outcome {
        case .success(let session): target.sessions[job.key] = session
        case .failure(let error): target.failures[job.key] = error
        }
        target.outstanding -= 1
        let ready = target.sealed && target.outstanding == 0
        condition.unlock()
        if ready { commitBatch(target) }
    }

    /// Commits every file of a sealed window whose session upload succeeded, ≤1000 per call.
    private func commitBatch(_ target: BatchWindow) {
        condition.lock()
        let failures = target.jobs.compactMap { job in target.failures[job.key].map { (job, $0) } }
        let ready = target.jobs.compactMap { job in target.sessions[job.key].map { (job, $0) } }
        // Every job of the window must end here, even one without a recorded outcome.
        let orphans = target.jobs.filter { target.sessions[$0.key] == nil && target.failures[$0.key] == nil }
        condition.unlock()
        for job in orphans {
            WriteBackLog.error("internal: \(job.record.path) reached its batch commit without an upload outcome")
            complete(job, .failure(.other("no upload outcome")))
        }
        for (job, error) in failures { complete(job, .failure(error)) }
        var start = 0
        while start < ready.count {
            let slice = Array(ready[start..<min(ready.count, start + configuration.maxBatchEntries)])
            start += slice.count
            let sessionByKey = Dictionary(slice.map { ($0.0.key, $0.1) }, uniquingKeysWith: { $1 })
            let live = markCommitting(slice.map { $0.0 })
            guard !live.isEmpty else { continue }
            let entries = live.map { (session: sessionByKey[$0.key]!, commit: commit(for: $0)) }
            do throws(RemoteError) {
                let results = try remote.finishBatch(entries)
                guard results.count == live.count else {
                    throw RemoteError.other("finishBatch returned \(results.count) results for \(live.count) entries")
                }
                for (job, result) in zip(live, results) { complete(job, result) }
            } catch {
                for job in live { complete(job, .failure(error)) }
            }
        }
    }

    /// A lone small file: one `upload` request that also commits.
    func runSingleUpload(_ job: UploadJob) {
        var job = job
        do throws(RemoteError) {
            if let landed = try prepare(&job) { complete(job, .success(landed)); return }
            guard let live = markCommitting([job]).first else { return }
            job = live
            let entry = try remote.upload(file: job.file.url, length: job.record.size, commit: commit(for: job),
                                          progress: progress(for: job))
            complete(job, .success(entry))
        } catch {
            complete(job, .failure(error))
        }
    }
}
