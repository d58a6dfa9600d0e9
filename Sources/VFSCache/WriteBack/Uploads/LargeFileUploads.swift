/// Large files: one concurrent upload session per file, with up to `chunksInFlight` appends of
/// `chunkSize` bytes in flight at once, each confirmed chunk recorded in the journal, then the
/// closing append of the last chunk and a one-entry `finishBatch`.
///
/// Resume: after a restart, or after a failed attempt, the chunks the journal says the server
/// confirmed are not sent again. If the server has forgotten the session (`sessionGone`) the
/// upload starts over from byte 0 in a new session.
import Foundation
import Synchronization

extension WriteBackEngine {
    func runLargeUpload(_ job: UploadJob) {
        var job = job
        do throws(RemoteError) {
            // A first attempt without a session (the file was not streamed while written, e.g.
            // written by the kernel itself: passthrough writes) is hashed while its chunks go:
            // only the commit needs the hash, and reading 1 GiB for it took ~1.4 s of the upload.
            var hashing = job.record.contentHash == nil && job.record.sessionID == nil && !job.verifyContent
                && job.record.state != .committing ? hashConcurrently(job) : nil
            if hashing == nil, let landed = try prepare(&job) { complete(job, .success(landed)); return }
            if let streamed = job.streamed, let pending = hashing {
                hashing = nil
                try adoptStreamedSession(streamed, into: &job, hash: pending)
            }
            if job.record.sessionID == nil || !job.record.sessionConcurrent {
                let id = try remote.startSession(concurrent: true)
                job.record.sessionID = id
                job.record.sessionConcurrent = true
                job.record.sessionClosed = false
                job.record.state = .uploading
                guard persist(job, resetChunks: true) else { throw .cancelled }
            }
            let sessionID = job.record.sessionID!
            let confirmed = (try? journal.confirmedChunks(staging: job.record.staging, sessionID: sessionID)) ?? [:]
            let plan = UploadPlanner.chunks(size: job.record.size, chunkSize: configuration.chunkSize)
            let missing = plan.dropLast().filter { confirmed[$0.offset] != $0.length }
            job.active.done.store(plan.dropLast().filter { confirmed[$0.offset] == $0.length }.reduce(0) { $0 + $1.length },
                                  ordering: .relaxed)
            try appendChunks(missing, of: job, sessionID: sessionID)
            if !job.record.sessionClosed {
                // The last chunk closes the session; if it was already sent (streamed while the file
                // was written), an empty closing append at the end does.
                var last = plan.last!
                if confirmed[last.offset] == last.length && last.length > 0 {
                    last = UploadPlanner.Chunk(offset: job.record.size, length: 0)
                }
                try remote.appendSession(id: sessionID, file: job.file.url, offset: last.offset, length: last.length,
                                         close: true, progress: nil)
                job.active.done.add(last.length, ordering: .relaxed)
                bytesSent.add(last.length, ordering: .relaxed)
                job.record.sessionClosed = true
                guard persist(job) else { throw .cancelled }
            }
            if let hashing {
                job.record.contentHash = try hashing.wait().hash
                guard persist(job) else { throw .cancelled }
            }
            guard let live = markCommitting([job]).first else { return }
            job = live
            let results = try remote.finishBatch([(session: RemoteUploadedSession(sessionID: sessionID, length: job.record.size),
                                                   commit: commit(for: job))])
            complete(job, results.first ?? .failure(.other("finishBatch returned no result")))
        } catch {
            complete(job, .failure(error))
        }
    }

    /// Uses the session a kernel stream filled while the file was written (StreamingUpload.swift)
    /// if the file at close still holds every chunk it sent: sends the chunks it lacks meanwhile,
    /// then compares each sent chunk's block digests with the file's, from `hash`. On a match the
    /// session and all its chunks are journaled, as if sent after close; otherwise the session is
    /// dropped and the caller starts a new one. Either way `job` leaves with the content hash.
    private func adoptStreamedSession(_ streamed: StreamedChunks, into job: inout UploadJob, hash: ConcurrentHash) throws(RemoteError) {
        let plan = UploadPlanner.chunks(size: job.record.size, chunkSize: configuration.chunkSize)
        let missing = plan.dropLast().filter { streamed.digests[$0.offset] == nil }
        try appendChunks(missing, of: job, sessionID: streamed.sessionID, journaling: false)
        let file = try hash.wait()
        job.record.contentHash = file.hash
        let blockSize = UInt64(DropboxChunkRules.blockSize)
        let unchanged = streamed.digests.allSatisfy { offset, digests in
            let first = Int(offset / blockSize)
            return offset % configuration.chunkSize == 0 && first + digests.count <= file.blocks.count
                && Array(file.blocks[first..<first + digests.count]) == digests
        }
        guard unchanged else {
            streamedSessionsDropped.add(1, ordering: .relaxed)
            condition.lock()
            if let dirty = files[job.key], dirty.file === job.file { dirty.rewritesInPlace = true }
            condition.unlock()
            WriteBackLog.info("\(job.record.path): bytes sent while it was written changed before its close; sending it again")
            guard persist(job) else { throw .cancelled }
            return
        }
        job.record.sessionID = streamed.sessionID
        job.record.sessionConcurrent = true
        job.record.sessionClosed = false
        job.record.state = .uploading
        guard persist(job, resetChunks: true) else { throw .cancelled }
        let sent = plan.dropLast().filter { streamed.digests[$0.offset] != nil } + missing
        for chunk in sent { guard confirmChunk(job, sessionID: streamed.sessionID, chunk: chunk) else { throw .cancelled } }
        streamedSessionsUsed.add(1, ordering: .relaxed)
    }

    /// Starts hashing `job`'s staging file on a thread of its own (what `prepare` would do first).
    private func hashConcurrently(_ job: UploadJob) -> ConcurrentHash {
        let result = ConcurrentHash()
        let thread = Thread { [self] in
            do throws(Errno) {
                let blocks = try blockDigests(of: job.file, size: job.record.size,
                                              digestsOfFirstBlocks: takePrefixDigests(job) ?? [])
                result.finish(.success(FileDigest(hash: Self.contentHash(ofBlocks: blocks), blocks: blocks)))
            } catch {
                result.finish(.failure(.other("cannot read staging file of \(job.record.path): \(error)")))
            }
        }
        thread.name = "dbxfs-hash"
        thread.start()
        return result
    }

    /// Appends `chunks` in parallel on the chunk pool, at most `chunksInFlight` at once, recording
    /// each confirmed one (unless `journaling` is false). Throws the first failure, after the
    /// appends in flight have ended.
    private func appendChunks(_ chunks: [UploadPlanner.Chunk], of job: UploadJob, sessionID: String,
                              journaling: Bool = true) throws(RemoteError) {
        guard !chunks.isEmpty else { return }
        let group = ChunkGroup()
        let limit = max(1, configuration.chunksInFlight)
        for chunk in chunks {
            if job.active.cancelled.load(ordering: .relaxed) { group.fail(.cancelled); break }
            guard group.waitForSlot(limit: limit, stop: stopFlag) else { break }
            chunkPool.submit {
                do throws(RemoteError) {
                    try self.remote.appendSession(id: sessionID, file: job.file.url, offset: chunk.offset, length: chunk.length,
                                                  close: false, progress: nil)
                    guard !journaling || self.confirmChunk(job, sessionID: sessionID, chunk: chunk) else { throw .cancelled }
                    job.active.done.add(chunk.length, ordering: .relaxed)
                    self.bytesSent.add(chunk.length, ordering: .relaxed)
                    group.finished(nil)
                } catch {
                    group.finished(error)
                }
            }
        }
        if let error = group.waitAll(stop: stopFlag) { throw error }
    }

    /// Records a confirmed chunk, unless the job is stale or the engine "died".
    private func confirmChunk(_ job: UploadJob, sessionID: String, chunk: UploadPlanner.Chunk) -> Bool {
        condition.lock(); defer { condition.unlock() }
        guard isCurrent(job) else { return false }
        do {
            try journal.confirmChunk(staging: job.record.staging, sessionID: sessionID, offset: chunk.offset, length: chunk.length)
            return true
        } catch {
            WriteBackLog.error("cannot record an uploaded chunk of \(job.record.path): \(error)")
            return false
        }
    }
}

/// Counts the appends of one large upload in flight and keeps the first error.
private final class ChunkGroup: @unchecked Sendable {
    // @unchecked: `inFlight` and `error` are only touched with `condition` held.
    private let condition = NSCondition()
    private var inFlight = 0
    private var error: RemoteError?

    /// Waits for a free slot and takes it; false if an append failed or the engine stopped.
    func waitForSlot(limit: Int, stop: borrowing Atomic<Bool>) -> Bool {
        condition.lock(); defer { condition.unlock() }
        while inFlight >= limit && error == nil {
            if stop.load(ordering: .relaxed) { error = error ?? .cancelled; return false }
            _ = condition.wait(until: Date().addingTimeInterval(0.2))
        }
        guard error == nil else { return false }
        inFlight += 1
        return true
    }

    func fail(_ failure: RemoteError) {
        condition.lock(); error = error ?? failure; condition.unlock()
    }

    func finished(_ failure: RemoteError?) {
        condition.lock()
        inFlight -= 1
        if let failure, error == nil { error = failure }
        condition.broadcast()
        condition.unlock()
    }

    /// Waits until no append is in flight (or the engine stopped: queued appends are dropped then).
    func waitAll(stop: borrowing Atomic<Bool>) -> RemoteError? {
        condition.lock(); defer { condition.unlock() }
        while inFlight > 0 {
            if stop.load(ordering: .relaxed) { return error ?? .cancelled }
            _ = condition.wait(until: Date().addingTimeInterval(0.2))
        }
        return error
    }
}

/// A file's content hash with the digests of its 4 MiB blocks.
struct FileDigest: Sendable {
    let hash: String
    let blocks: [[UInt8]]
}

/// The content hash a thread computes while the chunks are sent (`hashConcurrently`).
final class ConcurrentHash: Sendable {
    private let result = Mutex<Result<FileDigest, RemoteError>?>(nil)
    private let done = DispatchSemaphore(value: 0)

    func finish(_ outcome: Result<FileDigest, RemoteError>) {
        result.withLock { $0 = outcome }
        done.signal()
    }

    /// Waits for the hash (a thread that reads a file always ends).
    func wait() throws(RemoteError) -> FileDigest {
        done.wait()
        done.signal()
        return try result.withLock { $0! }.get()
    }
}
