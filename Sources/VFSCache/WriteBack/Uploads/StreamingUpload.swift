/// Uploading a large file while it is still being written. When the facade reports that a file is
/// written sequentially from byte 0 (`noteSequentialProgress`), the engine opens a concurrent
/// session once the file passes `largeFileThreshold` and sends each finished `chunkSize` chunk as
/// the writer passes its end, up to `chunksInFlight` at a time. At close the session is handed to
/// the normal large upload, which only sends what is missing, closes the session and commits. So
/// a 1 GiB copy is mostly on Dropbox by the time `close()` returns.
///
/// The bytes below the reported prefix must not change before close; a random write or truncate
/// below it must be reported with `noteRewrite`, which abandons the session. Should that ever be
/// missed, the commit still carries the whole file's content hash, so Dropbox refuses a mismatch
/// and the upload starts over: wrong bytes never land.
import Foundation
import Synchronization

/// One streaming session. Only touched with the engine's lock held, except `cancelled`.
final class StreamingUpload: @unchecked Sendable {
    // @unchecked: the vars are guarded by the owning engine's `condition`.
    let staging: String
    var sessionID: String?
    var starting = false
    /// Offset of the next chunk to send.
    var nextOffset: UInt64 = 0
    /// How far the writer has written contiguously.
    var writtenPrefix: UInt64 = 0
    var inFlight = 0
    var failed = false
    var handedOver = false
    /// Bytes the server confirmed, for `dbxfs status` while the file is still being written.
    var confirmedBytes: UInt64 = 0
    let startedAt = Date()
    let cancelled = Atomic<Bool>(false)

    init(staging: String) { self.staging = staging }

    /// Still doing network work: the file must not be uploaded or moved until this is false.
    var busy: Bool { starting || inFlight > 0 }
}

extension WriteBackEngine {
    /// The file at `path`, open for writing, now holds its final bytes [0, `contiguousBytes`):
    /// written in order and not to be changed before close, and `completedBlocks` are the digests
    /// of the 4 MiB blocks this write completed (PrefixHash.swift). Cheap; call it after each write.
    public func noteSequentialProgress(path: String, staging: StagingFile? = nil, contiguousBytes: UInt64,
                                       completedBlocks: CompletedBlocks) {
        condition.lock(); defer { condition.unlock() }
        guard !stopped, let dirty = dirtyFile(path: path, staging: staging), dirty.writing else { return }
        recordDigests(dirty, contiguousBytes: contiguousBytes, completed: completedBlocks)
        if dirty.streaming == nil {
            guard contiguousBytes >= configuration.largeFileThreshold else { return }
            dirty.streaming = StreamingUpload(staging: dirty.file.name)
        }
        let stream = dirty.streaming!
        guard !stream.failed, !stream.handedOver, !stream.cancelled.load(ordering: .relaxed) else { return }
        stream.writtenPrefix = max(stream.writtenPrefix, contiguousBytes)
        pump(stream, file: dirty.file)
    }

    /// The file at `path` was changed below what `noteSequentialProgress` reported (a seek back,
    /// a truncate): its streaming session is abandoned and the upload happens after close.
    public func noteRewrite(path: String, staging: StagingFile? = nil) {
        condition.lock(); defer { condition.unlock() }
        let found = dirtyFile(path: path, staging: staging)
        if let dirty = found, dirty.writing, let prefix = dirty.prefixHash {
            // A later noteSequentialProgress (after a truncate to 0) starts a fresh one.
            prefix.invalid = true
            dirty.prefixHash = nil
        }
        guard let dirty = found, let stream = dirty.streaming, !stream.handedOver else { return }
        stream.cancelled.store(true, ordering: .relaxed)
        stream.failed = true
    }

    /// Starts the session or more chunk appends, as far as the written prefix allows (lock held).
    private func pump(_ stream: StreamingUpload, file: StagingFile) {
        guard !stream.failed, !stream.cancelled.load(ordering: .relaxed) else { return }
        guard let sessionID = stream.sessionID else {
            guard !stream.starting else { return }
            stream.starting = true
            chunkPool.submit {
                let result: Result<String, RemoteError>
                do throws(RemoteError) { result = .success(try self.remote.startSession(concurrent: true)) } catch { result = .failure(error) }
                self.condition.lock(); defer { self.condition.unlock() }
                stream.starting = false
                switch result {
                case .success(let id): stream.sessionID = id; self.pump(stream, file: file)
                case .failure(let error):
                    stream.failed = true
                    WriteBackLog.debug("streaming upload of \(stream.staging) not started: \(error)")
                }
                self.condition.broadcast()
            }
            return
        }
        let chunkSize = configuration.chunkSize
        while stream.inFlight < configuration.chunksInFlight && stream.nextOffset + chunkSize <= stream.writtenPrefix {
            let offset = stream.nextOffset
            stream.nextOffset += chunkSize
            stream.inFlight += 1
            chunkPool.submit {
                var failure: RemoteError?
                do throws(RemoteError) {
                    try self.remote.appendSession(id: sessionID, file: file.url, offset: offset, length: chunkSize, close: false,
                                                  progress: nil)
                } catch { failure = error }
                self.condition.lock(); defer { self.condition.unlock() }
                stream.inFlight -= 1
                if let failure {
                    stream.failed = true
                    WriteBackLog.debug("streaming upload of \(stream.staging) stopped at \(offset): \(failure)")
                } else if !self.dead && !stream.cancelled.load(ordering: .relaxed) {
                    do {
                        try self.journal.confirmChunk(staging: stream.staging, sessionID: sessionID, offset: offset, length: chunkSize)
                        stream.confirmedBytes += chunkSize
                    } catch {
                        stream.failed = true
                    }
                }
                if !stream.handedOver { self.pump(stream, file: file) }
                self.condition.broadcast()
            }
        }
    }

    /// At close (lock held): hands a usable streaming session to the journal row, or abandons it.
    func handOverStreaming(_ dirty: DirtyFile, record: inout UploadRecord) -> String? {
        guard let stream = dirty.streaming else { return nil }
        if let id = stream.sessionID, !stream.failed, !stream.cancelled.load(ordering: .relaxed),
           record.size >= configuration.largeFileThreshold, stream.nextOffset <= record.size {
            stream.handedOver = true
            record.sessionID = id
            record.sessionConcurrent = true
            record.sessionClosed = false
            record.state = .uploading
            return id
        }
        stream.cancelled.store(true, ordering: .relaxed)
        stream.failed = true
        return nil
    }
}
