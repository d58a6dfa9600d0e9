/// Uploading a large file while it is still being written. When the facade reports that a file is
/// written sequentially from byte 0 (`noteSequentialProgress`), the engine opens a concurrent
/// session once the file passes `largeFileThreshold` and sends each finished `chunkSize` chunk as
/// the writer passes its end, up to `chunksInFlight` at a time. At close the session is handed to
/// the normal large upload, which only sends what is missing, closes the session and commits. So
/// a 1 GiB copy is mostly on Dropbox by the time `close()` returns.
///
/// The bytes below the reported prefix must not change before close; a random write or truncate
/// below it must be reported with `noteRewrite`, which abandons the session. (Dropbox does not
/// check a session's bytes against the file's hash at finish: files.stone's
/// `UploadSessionFinishArg.content_hash` covers only the finish call's own body. The engine
/// compares the hash Dropbox answers with its own and uploads again on a difference.)
///
/// **Kernel streams.** A file the kernel writes by itself (FUSE passthrough) tells the daemon
/// nothing of its writes, so it cannot promise a settled prefix. StagingWriteback.swift reports
/// how far such a file has settled (what has been there `kernelStreamSettle` seconds, while it
/// keeps growing, slower than `kernelStreamMaxRate`), and
/// the engine streams those chunks the same way, but checked: each chunk is read into memory,
/// its 4 MiB block digests taken, and sent with its content hash (`appendSessionChecked`: Dropbox
/// refuses it if it received other bytes), so the engine knows exactly what the session holds.
/// Nothing of such a session is journaled before close. After close the upload hashes the file as
/// it is on disk (as for any passthrough file) and uses the session only if every chunk it holds
/// has the digests of the file's blocks at that place; otherwise (the writer went back, e.g. to
/// patch a header) the session is dropped and the file is sent again in a new one. So the bytes
/// committed are the bytes at close, as without streaming.
import ContentHash
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
    /// A kernel stream (see the top of the file): checked chunks, not journaled before close.
    let fromKernel: Bool
    /// A kernel stream's chunks Dropbox confirmed: offset → the digests of their 4 MiB blocks.
    var checkedChunks: [UInt64: [[UInt8]]] = [:]

    init(staging: String, fromKernel: Bool = false) { self.staging = staging; self.fromKernel = fromKernel }

    /// Still doing network work: the file must not be uploaded or moved until this is false.
    var busy: Bool { starting || inFlight > 0 }

    /// Given up: its transfers stop at their next progress callback, and it is never used.
    func abandon() {
        cancelled.store(true, ordering: .relaxed)
        failed = true
    }
}

extension WriteBackEngine {
    /// The file at `path`, open for writing, now holds its final bytes [0, `contiguousBytes`):
    /// written in order and not to be changed before close, and `completedBlocks` are the digests
    /// of the 4 MiB blocks this write completed (PrefixHash.swift). Cheap; call it after each write.
    public func noteSequentialProgress(path: String, staging: StagingFile? = nil, contiguousBytes: UInt64,
                                       completedBlocks: CompletedBlocks) {
        condition.lock(); defer { condition.unlock() }
        guard !stopped, let dirty = dirtyFile(path: path, staging: staging), dirty.writing else { return }
        // The kernel may write this file too (passthrough): what the facade reports is not all of
        // it, so neither its digests nor a stream of it can be trusted (`retainStaging` dropped
        // those from before the kernel's open).
        guard dirty.kernelOpens == 0 else { return }
        recordDigests(dirty, contiguousBytes: contiguousBytes, completed: completedBlocks)
        if dirty.streaming?.fromKernel == true { return }   // the kernel's writes lead: its stream stays
        if dirty.streaming == nil {
            guard contiguousBytes >= configuration.largeFileThreshold else { return }
            dirty.streaming = StreamingUpload(staging: dirty.file.name)
            dirty.file.streamStarts()
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
        // A later noteSequentialProgress (after a truncate to 0) starts a fresh one.
        if let dirty = found, dirty.writing { dirty.dropPrefixHash() }
        guard let dirty = found, let stream = dirty.streaming, !stream.handedOver else { return }
        stream.abandon()
    }

    /// A watched staging file the kernel writes grew or shrank (StagingWriteback.swift): bytes
    /// below `settled` have been there `kernelStreamSettle` seconds and the file still grows, not
    /// too fast. Streams them once `largeFileThreshold` bytes settled; a file shrunk below what was
    /// sent drops its stream.
    func noteKernelGrowth(_ file: StagingFile, settled: UInt64, size: UInt64) {
        condition.lock(); defer { condition.unlock() }
        guard !stopped, let dirty = dirtyFile(holding: file), dirty.writing, dirty.kernelOpens > 0,
              !dirty.rewritesInPlace else { return }
        if let stream = dirty.streaming {
            guard stream.fromKernel, !stream.handedOver else { return }
            if size < stream.nextOffset {
                stream.abandon()
                dirty.rewritesInPlace = true
                WriteBackLog.debug("\(dirty.path) was cut below what was sent while it was written; sending it after its close")
                return
            }
        } else {
            guard settled >= configuration.largeFileThreshold else { return }
            dirty.streaming = StreamingUpload(staging: dirty.file.name, fromKernel: true)
            WriteBackLog.debug("uploading \(dirty.path) while the kernel writes it")
        }
        let stream = dirty.streaming!
        guard !stream.failed, !stream.cancelled.load(ordering: .relaxed) else { return }
        stream.writtenPrefix = max(stream.writtenPrefix, settled)
        pump(stream, file: dirty.file)
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
        let limit = stream.fromKernel ? min(configuration.kernelStreamChunksInFlight, configuration.chunksInFlight)
                                      : configuration.chunksInFlight
        while stream.inFlight < limit && stream.nextOffset + chunkSize <= stream.writtenPrefix {
            let offset = stream.nextOffset
            stream.nextOffset += chunkSize
            stream.inFlight += 1
            if !stream.fromKernel { file.streamReads(upTo: offset + chunkSize) }
            chunkPool.submit {
                var failure: RemoteError?
                var digests: [[UInt8]] = []
                do throws(RemoteError) {
                    if stream.fromKernel {
                        digests = try self.appendChecked(file, sessionID: sessionID, offset: offset, length: chunkSize)
                    } else {
                        try self.remote.appendSession(id: sessionID, file: file.url, offset: offset, length: chunkSize, close: false,
                                                      progress: nil)
                    }
                } catch { failure = error }
                self.condition.lock(); defer { self.condition.unlock() }
                stream.inFlight -= 1
                if let failure {
                    stream.failed = true
                    WriteBackLog.debug("streaming upload of \(stream.staging) stopped at \(offset): \(failure)")
                } else if stream.fromKernel {
                    // Not journaled: these bytes count only once checked against the file at close.
                    stream.checkedChunks[offset] = digests
                    stream.confirmedBytes += chunkSize
                    self.backPressure.streamedBytes.add(chunkSize, ordering: .relaxed)
                } else if !self.dead && !stream.cancelled.load(ordering: .relaxed) {
                    do {
                        try self.journal.confirmChunk(staging: stream.staging, sessionID: sessionID, offset: offset, length: chunkSize)
                        stream.confirmedBytes += chunkSize
                        self.backPressure.streamedBytes.add(chunkSize, ordering: .relaxed)
                    } catch {
                        stream.failed = true
                    }
                }
                if !stream.handedOver { self.pump(stream, file: file) }
                self.condition.broadcast()
            }
        }
    }

    /// Reads one chunk of a kernel stream, takes its block digests and appends it with its content
    /// hash, so Dropbox holds exactly the bytes those digests describe. Returns the digests.
    /// The chunk is read into a mapping of its own, unmapped when the request lets go of it: the
    /// daemon keeps buffers up to 64 MiB on the heap (main.swift), which would hold on to them.
    private func appendChecked(_ file: StagingFile, sessionID: String, offset: UInt64, length: UInt64) throws(RemoteError) -> [[UInt8]] {
        let count = Int(length)
        guard let base = mmap(nil, count, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0), base != MAP_FAILED else {
            throw .other("cannot map \(count) bytes to send a chunk of \(file.name)")
        }
        let bytes = Data(bytesNoCopy: base, count: count, deallocator: .custom { pointer, size in munmap(pointer, size) })
        let read: Int
        do throws(Errno) { read = try file.read(at: offset, into: UnsafeMutableRawBufferPointer(start: base, count: count)) } catch {
            throw .other("cannot read staging file \(file.name): \(error)")
        }
        guard read == count else { throw .other("staging file \(file.name) is shorter than \(offset + length)") }
        let digester = BlockDigester()
        var digests = digester.update(UnsafeRawBufferPointer(start: base, count: count))
        if let partial = digester.finishPartialBlock() { digests.append(partial) }
        try remote.appendSessionChecked(id: sessionID, bytes: bytes, offset: offset, contentHash: Self.contentHash(ofBlocks: digests))
        return digests
    }

    /// At close (lock held): hands a usable streaming session to the journal row, or abandons it.
    /// A kernel stream is handed to the upload in memory only (`StreamedChunks`), never to the row.
    func handOverStreaming(_ dirty: DirtyFile, record: inout UploadRecord) -> String? {
        guard let stream = dirty.streaming else { return nil }
        // A change below what was sent that the facade did not report (`noteRewrite`): Dropbox
        // would commit the session's stale bytes, since it checks no whole-file hash at finish.
        let stale = !stream.fromKernel && dirty.file.changedUnderStream
        if stale { WriteBackLog.info("\(dirty.path) changed below what its streaming upload sent; sending it again") }
        if let id = stream.sessionID, !stale, !stream.failed, !stream.cancelled.load(ordering: .relaxed),
           record.size >= configuration.largeFileThreshold, stream.nextOffset <= record.size {
            stream.handedOver = true
            if stream.fromKernel { return nil }
            record.sessionID = id
            record.sessionConcurrent = true
            record.sessionClosed = false
            record.state = .uploading
            return id
        }
        stream.abandon()
        return nil
    }
}

/// What a kernel stream sent before close, handed to the file's first upload after it
/// (`LargeFileUploads.adoptStreamedSession`): the session and each chunk's block digests.
struct StreamedChunks: Sendable {
    let sessionID: String
    /// Offset (a multiple of the chunk size) → the digests of the chunk's 4 MiB blocks.
    let digests: [UInt64: [[UInt8]]]
    let startedAt: Date
}
