/// Uploads: `files/upload` (one request), upload sessions (start, append_v2, finish,
/// finish_batch_v2), and `uploadFile`, which picks one request or a concurrent session with
/// parallel appends.
///
/// Retry rules specific to writes:
/// - append_v2 meeting `incorrect_offset` continues from the server's `correct_offset`: if the
///   server already has the whole chunk (our earlier attempt landed), the append is done; if it has
///   part of it, only the rest is sent. So a retried append never writes bytes twice.
/// - upload / finish that fail ambiguously and then meet a conflict or a vanished session look at
///   the target: if it holds exactly our bytes (same content hash), the earlier attempt committed.
/// - upload_session/start may leave an unused session behind after a retry; sessions expire
///   server-side after 7 days, and nothing is committed by them.
import ContentHash
import Foundation

public enum UploadSessionType: String, Sendable {
    case sequential, concurrent
}

/// One closed session to commit in `uploadSessionFinishBatch`.
public struct UploadSessionFinishEntry: Sendable, Equatable {
    public var sessionID: String
    /// Total bytes uploaded to the session.
    public var length: UInt64
    public var commit: CommitInfo
    /// Content hash of the whole file, if known: lets a retried batch recognise entries an earlier
    /// attempt already committed.
    public var fileContentHash: String?

    public init(sessionID: String, length: UInt64, commit: CommitInfo, fileContentHash: String? = nil) {
        self.sessionID = sessionID; self.length = length; self.commit = commit; self.fileContentHash = fileContentHash
    }
}

extension DropboxClient {
    /// Dropbox's limit for the body of one upload request.
    public static let maxRequestBody: UInt64 = 150 * 1024 * 1024
    /// Appends to concurrent sessions must be multiples of this (except the last).
    public static let concurrentChunkUnit: UInt64 = 4 * 1024 * 1024

    // MARK: Single request

    /// Uploads `body` (≤ 150 MiB) in one request and commits it. `contentHash` is the Dropbox
    /// content hash of the body; when given, the server rejects corrupted bytes.
    public func upload(_ commit: CommitInfo, body: UploadBody, contentHash: String? = nil,
                       progress: TransferProgress? = nil, cancel: CancelHandle? = nil) throws(DropboxError) -> FileMetadata {
        let route = Route.upload("files/upload", errors: .upload)
        var arg = commit.jsonFields
        if let contentHash { arg["content_hash"] = .string(contentHash) }
        return try committingRequest(route, arg: arg, body: body, progress: progress, cancel: cancel,
                                     path: commit.path, contentHash: contentHash) { error in
            if case .route(.pathWrite(.conflict(.file)), _) = error { return true }
            return false
        }
    }

    // MARK: Sessions

    /// Starts a session; `body` may carry the first bytes (sequential sessions only).
    public func uploadSessionStart(type: UploadSessionType = .sequential, close: Bool = false, body: UploadBody = .empty,
                                   contentHash: String? = nil, progress: TransferProgress? = nil,
                                   cancel: CancelHandle? = nil) throws(DropboxError) -> String {
        let route = Route.upload("files/upload_session/start", errors: .none)
        var arg: [String: JSON] = ["close": .bool(close), "session_type": [".tag": .string(type.rawValue)]]
        if let contentHash { arg["content_hash"] = .string(contentHash) }
        let tracker = MonotonicProgressBox(progress, total: body.length)
        let json = try withRetries(route: route, cancel: cancel) { [arg] (context) throws(DropboxError) -> JSON in
            try attempt(route, arg: .object(arg), context: context, body: body, cancel: cancel, onSent: { tracker.update($0) }).result
        }
        guard let id = json["session_id"]?.string else { throw .unexpectedResponse("upload_session/start without session_id") }
        return id
    }

    /// Appends `body` at `offset`. `close` marks the last append. `contentHash` covers `body`.
    public func uploadSessionAppend(sessionID: String, offset: UInt64, body: UploadBody, close: Bool = false,
                                    contentHash: String? = nil, progress: TransferProgress? = nil,
                                    cancel: CancelHandle? = nil) throws(DropboxError) {
        let route = Route.upload("files/upload_session/append_v2", errors: .uploadSession)
        let tracker = MonotonicProgressBox(progress, total: body.length)
        var skipped: UInt64 = 0   // bytes of `body` the server turned out to have already
        try withRetries(route: route, cancel: cancel) { (context) throws(DropboxError) -> Void in
            while true {
                var arg: [String: JSON] = ["cursor": ["session_id": .string(sessionID), "offset": .int(Int64(offset + skipped))],
                                           "close": .bool(close)]
                // The hash covers the whole body; after a partial skip it no longer applies.
                if skipped == 0, let contentHash { arg["content_hash"] = .string(contentHash) }
                let part = skipped == 0 ? body : body.suffix(from: skipped)
                let base = skipped
                do throws(DropboxError) {
                    _ = try attempt(route, arg: .object(arg), context: context, body: part, cancel: cancel,
                                    onSent: { tracker.update(base + $0) })
                    return
                } catch .route(.uploadSession(.incorrectOffset(let correct)), let summary) {
                    guard correct >= offset, correct <= offset + body.length, correct != offset + skipped else {
                        // The server is missing bytes before this chunk (or the answer is
                        // inconsistent): not something this append can repair.
                        throw .route(.uploadSession(.incorrectOffset(correctOffset: correct)), summary: summary)
                    }
                    statistics.update { $0.offsetCorrections += 1 }
                    skipped = correct - offset
                    tracker.update(skipped)
                    if skipped == body.length && !close { return }
                    // With close=true, a zero-byte append still has to close the session.
                }
            }
        }
    }

    /// Commits a session whose total length is `offset` (after an optional final `body`).
    public func uploadSessionFinish(sessionID: String, offset: UInt64, commit: CommitInfo, body: UploadBody = .empty,
                                    contentHash: String? = nil, fileContentHash: String? = nil,
                                    progress: TransferProgress? = nil, cancel: CancelHandle? = nil) throws(DropboxError) -> FileMetadata {
        let route = Route.upload("files/upload_session/finish", errors: .uploadSessionFinish)
        var arg: [String: JSON] = ["cursor": ["session_id": .string(sessionID), "offset": .int(Int64(offset))],
                                   "commit": .object(commit.jsonFields)]
        if let contentHash { arg["content_hash"] = .string(contentHash) }
        return try committingRequest(route, arg: arg, body: body, progress: progress, cancel: cancel,
                                     path: commit.path, contentHash: fileContentHash) { error in
            switch error {
            case .route(.uploadSession, _), .route(.pathWrite(.conflict(.file)), _): return true
            default: return false
            }
        }
    }

    /// One request that commits a file at `path` (upload, upload_session/finish), with retries. A
    /// retry whose earlier attempt may have committed, refused with an error `earlierCommitShows`
    /// accepts, ends well if Dropbox already has our `contentHash` there (the lost reply's commit).
    private func committingRequest(_ route: Route, arg: [String: JSON], body: UploadBody, progress: TransferProgress?,
                                   cancel: CancelHandle?, path: String, contentHash: String?,
                                   earlierCommitShows: (DropboxError) -> Bool) throws(DropboxError) -> FileMetadata {
        let tracker = MonotonicProgressBox(progress, total: body.length)
        return try withRetries(route: route, cancel: cancel) { (context) throws(DropboxError) -> FileMetadata in
            do throws(DropboxError) {
                let result = try attempt(route, arg: .object(arg), context: context, body: body, cancel: cancel,
                                         onSent: { tracker.update($0) })
                return try FileMetadata(json: result.result)
            } catch let error where context.earlierAttemptMayHaveCommitted && earlierCommitShows(error) {
                if let committed = try alreadyCommitted(path: path, contentHash: contentHash) { return committed }
                throw error
            }
        }
    }

    /// Commits closed sessions together (finish_batch_v2, synchronous). One result per entry.
    ///
    /// Dropbox commits one batch at a time per namespace (files.stone on finish_batch: "should be
    /// executed serially"; rclone's batcher): this client sends one at a time, the others wait here.
    /// Entries refused with `too_many_write_operations` (their sessions are still open) are sent
    /// again in a new batch after a jittered wait, as a 429 would be.
    public func uploadSessionFinishBatch(_ entries: [UploadSessionFinishEntry]) throws(DropboxError) -> [Result<FileMetadata, DropboxError>] {
        batchCommits.lock()
        defer { batchCommits.unlock() }
        return try resendingContended(entries) { (batch) throws(DropboxError) in try finishBatchOnce(batch) }
    }

    /// One finish_batch_v2 call, with the usual retries of the call itself.
    private func finishBatchOnce(_ entries: [UploadSessionFinishEntry]) throws(DropboxError) -> [Result<FileMetadata, DropboxError>] {
        let route = Route.rpc("files/upload_session/finish_batch_v2")
        let arg: JSON = ["entries": .array(entries.map { entry in
            ["cursor": ["session_id": .string(entry.sessionID), "offset": .int(Int64(entry.length))],
             "commit": .object(entry.commit.jsonFields)]
        })]
        return try withRetries(route: route) { (context) throws(DropboxError) -> [Result<FileMetadata, DropboxError>] in
            let json = try attempt(route, arg: arg, context: context).result
            guard let results = json["entries"]?.array, results.count == entries.count else {
                throw .unexpectedResponse("finish_batch_v2 answered a different number of entries")
            }
            var out: [Result<FileMetadata, DropboxError>] = []
            for (entry, result) in zip(entries, results) {
                if result.tag == "success" {
                    // A success entry has the FileMetadata fields inlined next to the tag.
                    out.append(Result { () throws(DropboxError) in try FileMetadata(json: result) })
                    continue
                }
                let failure = result["failure"] ?? .null
                if RouteError.isWriteContention(failure) {
                    out.append(.failure(.rateLimited(reason: RouteError.writeContentionTag, retryAfter: 1)))
                    continue
                }
                let error = DropboxError.route(RouteError(json: failure, shape: .uploadSessionFinish),
                                               summary: failure.tag ?? "failure")
                if context.earlierAttemptMayHaveCommitted, case .route(.uploadSession, _) = error,
                   let committed = try alreadyCommitted(path: entry.commit.path, contentHash: entry.fileContentHash) {
                    out.append(.success(committed))
                } else {
                    out.append(.failure(error))
                }
            }
            return out
        }
    }

    /// After an ambiguous failure: the file at `path` if it has exactly our content.
    private func alreadyCommitted(path: String, contentHash: String?) throws(DropboxError) -> FileMetadata? {
        guard let contentHash, case .file(let file)? = try metadataIfExists(path: path),
              file.contentHash == contentHash else { return nil }
        statistics.update { $0.ambiguousWritesResolved += 1 }
        return file
    }

    // MARK: Whole files

    /// Uploads a whole file: one request up to `singleRequestLimit`, otherwise a concurrent session
    /// whose `chunkSize` appends run on `parallelism` threads, then finish. `fileContentHash`, when
    /// given, is checked against the committed file (and lets retries recognise a landed commit).
    public func uploadFile(_ commit: CommitInfo, body: UploadBody, fileContentHash: String? = nil,
                           singleRequestLimit: UInt64 = 8 * 1024 * 1024, chunkSize: UInt64 = 16 * 1024 * 1024,
                           parallelism: Int = 4, progress: TransferProgress? = nil,
                           cancel: CancelHandle? = nil) throws(DropboxError) -> FileMetadata {
        precondition(chunkSize % Self.concurrentChunkUnit == 0 && chunkSize <= Self.maxRequestBody,
                     "chunkSize must be a multiple of 4 MiB and at most 150 MiB")
        let length = body.length
        let committed: FileMetadata
        if length <= min(singleRequestLimit, Self.maxRequestBody) {
            committed = try upload(commit, body: body, contentHash: fileContentHash, progress: progress, cancel: cancel)
        } else {
            let session = try uploadSessionStart(type: .concurrent, cancel: cancel)
            try appendInParallel(sessionID: session, body: body, chunkSize: chunkSize, parallelism: parallelism,
                                 progress: progress, cancel: cancel)
            committed = try uploadSessionFinish(sessionID: session, offset: length, commit: commit,
                                                fileContentHash: fileContentHash, cancel: cancel)
        }
        if let fileContentHash, let got = committed.contentHash, got != fileContentHash {
            throw .unexpectedResponse("committed \(commit.path) has content hash \(got), expected \(fileContentHash)")
        }
        return committed
    }

    /// Appends every chunk of `body` to a concurrent session and closes it. All chunks but the last
    /// go in parallel; the last (close=true) goes once they have all landed.
    public func appendInParallel(sessionID: String, body: UploadBody, chunkSize: UInt64, parallelism: Int,
                                 progress: TransferProgress? = nil, cancel: CancelHandle? = nil) throws(DropboxError) {
        let length = body.length
        let chunkCount = max(1, Int((length + chunkSize - 1) / chunkSize))
        let tracker = MonotonicProgressBox(progress, total: length)
        let perChunk = ChunkProgress(count: chunkCount) { tracker.update($0) }
        let stopSiblings = CancelHandle(parent: cancel)
        let failure = FirstError()

        @Sendable func appendChunk(_ index: Int) throws(DropboxError) {
            let start = UInt64(index) * chunkSize
            let count = min(chunkSize, length - start)
            try uploadSessionAppend(sessionID: sessionID, offset: start, body: body.slice(from: start, count: count),
                                    close: index == chunkCount - 1,
                                    progress: { done, _ in perChunk.set(index, done) }, cancel: stopSiblings)
        }

        let next = NextIndex(limit: chunkCount - 1)
        let threads = min(parallelism, chunkCount - 1)
        let group = DispatchGroup()
        for _ in 0..<max(0, threads) {
            group.enter()
            // Plain threads, not the cooperative pool: each blocks in curl for a whole chunk.
            let thread = Thread {
                defer { group.leave() }
                while !stopSiblings.isCancelled, let index = next.take() {
                    do throws(DropboxError) {
                        try appendChunk(index)
                    } catch {
                        failure.record(error)
                        stopSiblings.cancel()
                    }
                }
            }
            thread.stackSize = 1 << 20
            thread.start()
        }
        group.wait()
        if let error = failure.error { throw error }
        if cancel?.isCancelled == true { throw .cancelled }
        try appendChunk(chunkCount - 1)
    }
}

/// Hands out chunk indices 0..<limit to worker threads.
private final class NextIndex: @unchecked Sendable {
    // Safe: `value` is only touched under `lock`.
    private let lock = NSLock()
    private var value = 0
    private let limit: Int
    init(limit: Int) { self.limit = limit }
    func take() -> Int? {
        lock.withLock {
            guard value < limit else { return nil }
            defer { value += 1 }
            return value
        }
    }
}

/// The first error of several workers (the cause; later ones are usually `.cancelled`).
private final class FirstError: @unchecked Sendable {
    // Safe: `stored` is only touched under `lock`.
    private let lock = NSLock()
    private var stored: DropboxError?
    func record(_ error: DropboxError) { lock.withLock { if stored == nil || stored == .cancelled { stored = error } } }
    var error: DropboxError? { lock.withLock { stored } }
}

/// Bytes done per chunk, summed for the whole-file progress.
private final class ChunkProgress: @unchecked Sendable {
    // Safe: `done` and `sum` are only touched under `lock`.
    private let lock = NSLock()
    private var done: [UInt64]
    private var sum: UInt64 = 0
    private let report: (UInt64) -> Void
    init(count: Int, report: @escaping (UInt64) -> Void) { done = Array(repeating: 0, count: count); self.report = report }
    func set(_ index: Int, _ value: UInt64) {
        let total: UInt64 = lock.withLock {
            if value > done[index] { sum += value - done[index]; done[index] = value }
            return sum
        }
        report(total)
    }
}
