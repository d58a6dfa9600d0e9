/// Namespace changes in batches: delete_batch, create_folder_batch and move_batch_v2, each polled
/// through its /check route when Dropbox runs it as a job (files.stone `*Launch` unions: either
/// `complete` at once or `async_job_id`). One result per entry, at the entry's position.
///
/// Entries refused with `too_many_write_operations` are sent again in a new batch after a jittered
/// wait, as a 429 would be (`resendingContended`, shared with finish_batch_v2); the other entries'
/// results stand. A launch retried after a failure that may have reached the server (a 5xx, a
/// lost connection) runs the whole batch again: its entries then answer with the tell-tale
/// errors of our own earlier success (delete: not_found; create: conflict with a folder; move:
/// source not_found), which the caller (the write-back engine) reads as done.
import Foundation

/// One delete of a batch (files.stone `DeleteArg`). `parentRev` works for files only: Dropbox
/// then deletes the file only if its latest rev is that one (else `path_write/conflict/file`).
public struct DeleteArg: Sendable, Equatable {
    public var path: String
    public var parentRev: String?
    public init(path: String, parentRev: String? = nil) { self.path = path; self.parentRev = parentRev }
}

/// One move of a batch (files.stone `RelocationPath`).
public struct RelocationPath: Sendable, Equatable {
    public var from: String
    public var to: String
    public init(from: String, to: String) { self.from = from; self.to = to }
}

extension DropboxClient {
    /// Deletes the entries in one job (delete_batch, polled with delete_batch/check until done).
    public func deleteBatch(_ entries: [DeleteArg]) throws(DropboxError) -> [Result<Metadata, DropboxError>] {
        try resendingContended(entries) { (batch) throws(DropboxError) -> [Result<Metadata, DropboxError>] in
            let arg: JSON = ["entries": .array(batch.map { entry in
                var fields: [String: JSON] = ["path": .string(entry.path)]
                if let rev = entry.parentRev { fields["parent_rev"] = .string(rev) }
                return .object(fields)
            })]
            let results = try runBatch(launch: "files/delete_batch", check: "files/delete_batch/check", arg: arg, count: batch.count)
            return results.map { result in
                // DeleteBatchResultData is a struct: its `metadata` is inlined next to the tag.
                if result.tag == "success" { return Result { () throws(DropboxError) in try Metadata(json: result["metadata"] ?? .null) } }
                return .failure(Self.entryFailure(result["failure"], shape: .delete))
            }
        }
    }

    /// Creates the folders (create_folder_batch, polled when Dropbox runs it as a job). Parents
    /// are created as needed; a folder already there fails with `path/conflict/folder`.
    public func createFolderBatch(paths: [String]) throws(DropboxError) -> [Result<FolderMetadata, DropboxError>] {
        try resendingContended(paths) { (batch) throws(DropboxError) -> [Result<FolderMetadata, DropboxError>] in
            let arg: JSON = ["paths": .array(batch.map { .string($0) }), "autorename": false, "force_async": false]
            let results = try runBatch(launch: "files/create_folder_batch", check: "files/create_folder_batch/check", arg: arg,
                                       count: batch.count)
            return results.map { result in
                if result.tag == "success" { return Result { () throws(DropboxError) in try FolderMetadata(json: result["metadata"] ?? .null) } }
                return .failure(Self.entryFailure(result["failure"], shape: .write))
            }
        }
    }

    /// Moves the entries (move_batch_v2, polled with move_batch/check_v2 when it runs as a job).
    /// Parents of the targets are created. Case-only renames are not supported (files.stone).
    public func moveBatch(_ entries: [RelocationPath]) throws(DropboxError) -> [Result<Metadata, DropboxError>] {
        try resendingContended(entries) { (batch) throws(DropboxError) -> [Result<Metadata, DropboxError>] in
            let arg: JSON = ["entries": .array(batch.map { ["from_path": .string($0.from), "to_path": .string($0.to)] }),
                             "autorename": false, "allow_ownership_transfer": false]
            let results = try runBatch(launch: "files/move_batch_v2", check: "files/move_batch/check_v2", arg: arg, count: batch.count)
            return results.map { result -> Result<Metadata, DropboxError> in
                // RelocationBatchResultEntry.success is a Metadata (subtypes): nested under the tag.
                if result.tag == "success" { return Result { () throws(DropboxError) in try Metadata(json: result["success"] ?? .null) } }
                let failure = result["failure"] ?? .null
                switch failure.tag {
                case "relocation_error":
                    return .failure(Self.entryFailure(failure["relocation_error"], shape: .relocation))
                case "internal_error":
                    // "Verify that the action you were taking succeeded, and if not, try again."
                    return .failure(.server(status: 500, message: "move_batch_v2 entry: internal_error"))
                default:
                    return .failure(Self.entryFailure(failure, shape: .relocation))
                }
            }
        }
    }

    // MARK: Launch and poll

    /// Launches a batch route and returns its entries, polling `check` while it runs as a job.
    private func runBatch(launch: String, check: String, arg: JSON, count: Int) throws(DropboxError) -> [JSON] {
        var status = try call(.rpc(launch), arg: arg)
        var wait = 0.05
        while status.tag != "complete" {
            switch status.tag {
            case "async_job_id", "in_progress":
                guard let jobID = status["async_job_id"]?.string else { throw .unexpectedResponse("\(launch) without async_job_id") }
                _ = configuration.retryPolicy.sleeper.sleep(seconds: wait, cancel: nil)
                wait = min(wait * 2, 1)
                status = try call(.rpc(check), arg: ["async_job_id": .string(jobID)])
                if status.tag == "in_progress" { status = .object(["async_job_id": .string(jobID), ".tag": "in_progress"]) }
            case "failed":
                throw .route(.other(tag: status["failed"]?.tag ?? "failed"), summary: "\(launch) failed")
            default:
                throw .unexpectedResponse("\(launch) status \(status.tag ?? "none")")
            }
        }
        guard let entries = status["entries"]?.array, entries.count == count else {
            throw .unexpectedResponse("\(launch) answered a different number of entries")
        }
        return entries
    }

    /// One entry's failure: contention as `.rateLimited` (sent again), anything else as the route
    /// error it would be for the single route.
    private static func entryFailure(_ failure: JSON?, shape: RouteErrorShape) -> DropboxError {
        guard let failure else { return .unexpectedResponse("batch entry without failure") }
        if RouteError.isWriteContention(failure) {
            return .rateLimited(reason: RouteError.writeContentionTag, retryAfter: 1)
        }
        return .route(RouteError(json: failure, shape: shape), summary: failure.tag ?? "failure")
    }

    /// Runs `once` over `entries`, then again over the entries it answered with
    /// `too_many_write_operations`, after the retry policy's wait, until none is left or the
    /// policy gives up (those entries then keep that failure).
    func resendingContended<Entry, Value>(_ entries: [Entry],
                                          _ once: ([Entry]) throws(DropboxError) -> [Result<Value, DropboxError>])
        throws(DropboxError) -> [Result<Value, DropboxError>] {
        let policy = configuration.retryPolicy
        var tally = RetryPolicy.Tally()
        var results = [Result<Value, DropboxError>?](repeating: nil, count: entries.count)
        var pending = Array(entries.indices)
        while !pending.isEmpty {
            let outcome = try once(pending.map { entries[$0] })
            guard outcome.count == pending.count else { throw .unexpectedResponse("a batch answered \(outcome.count) of \(pending.count) entries") }
            var contended: [Int] = []
            var contention: DropboxError?
            for (index, result) in zip(pending, outcome) {
                if case .failure(let error) = result, case .rateLimited = error {
                    contended.append(index)
                    contention = error
                } else {
                    results[index] = result
                }
            }
            guard let contention else { break }
            let decision = policy.decide(after: contention, tally: tally)
            RetryPolicy.record(contention, decision: decision, in: &tally)
            if case .rateLimited(_, let retryAfter) = contention { pacer?.rateLimited(retryAfter: retryAfter, slowDown: false) }
            guard case .retry(let delay) = decision else {
                for index in contended { results[index] = .failure(contention) }
                break
            }
            statistics.countRetry(of: contention)
            if let limit = policy.maxTotalWait, delay > limit {
                for index in contended { results[index] = .failure(contention) }
                break
            }
            if !policy.sleeper.sleep(seconds: delay, cancel: nil) { throw .cancelled }
            pending = contended
        }
        return results.map { $0 ?? .failure(.unexpectedResponse("a batch gave no result for an entry")) }
    }
}
