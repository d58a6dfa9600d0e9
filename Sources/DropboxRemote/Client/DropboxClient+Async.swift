/// Async wrappers for callers in Swift concurrency. Each runs the blocking call on a dedicated
/// thread (a new `Thread`, never the cooperative pool, which must not block) and resumes the
/// continuation when it returns. Task cancellation fires the call's cancel handle, so an
/// abandoned task stops its transfer promptly.
import Foundation

extension DropboxClient {
    /// Runs `work` on a dedicated thread and awaits its result. The building block of the
    /// wrappers below; usable for any route: `try await client.run { try $0.getMetadata(path: p) }`.
    public func run<T: Sendable>(cancel: CancelHandle? = nil,
                                 _ work: @escaping @Sendable (DropboxClient, CancelHandle) throws(DropboxError) -> T) async throws(DropboxError) -> T {
        let handle = CancelHandle(parent: cancel)
        let result: Result<T, DropboxError> = await withTaskCancellationHandler {
            await withCheckedContinuation { (continuation: CheckedContinuation<Result<T, DropboxError>, Never>) in
                let thread = Thread { [self] in
                    do throws(DropboxError) {
                        continuation.resume(returning: .success(try work(self, handle)))
                    } catch {
                        continuation.resume(returning: .failure(error))
                    }
                }
                thread.start()
            }
        } onCancel: {
            handle.cancel()
        }
        return try result.get()
    }

    public func getMetadata(path: String) async throws(DropboxError) -> Metadata {
        try await run { client, _ throws(DropboxError) in try client.getMetadata(path: path) }
    }

    public func listFolder(path: String, recursive: Bool = false, limit: Int? = nil) async throws(DropboxError) -> ListFolderResult {
        try await run { client, _ throws(DropboxError) in try client.listFolder(path: path, recursive: recursive, limit: limit) }
    }

    public func listFolderContinue(cursor: String) async throws(DropboxError) -> ListFolderResult {
        try await run { client, _ throws(DropboxError) in try client.listFolderContinue(cursor: cursor) }
    }

    /// Downloads into a local file (created or truncated).
    public func download(path: String, to file: URL, range: Range<UInt64>? = nil,
                         progress: TransferProgress? = nil) async throws(DropboxError) -> FileMetadata {
        try await run { client, cancel throws(DropboxError) in
            guard FileManager.default.createFile(atPath: file.path, contents: nil),
                  let handle = try? FileHandle(forWritingTo: file) else { throw .localIO("cannot create \(file.path)") }
            defer { try? handle.close() }
            var writeError: Error?
            let metadata = try client.download(path: path, range: range, progress: progress, cancel: cancel) { buffer in
                do { try handle.write(contentsOf: buffer) } catch { writeError = error; return false }
                return true
            }
            if let writeError { throw .localIO("writing \(file.path): \(writeError)") }
            return metadata
        }
    }

    public func uploadFile(_ commit: CommitInfo, body: UploadBody, fileContentHash: String? = nil,
                           progress: TransferProgress? = nil) async throws(DropboxError) -> FileMetadata {
        try await run { client, cancel throws(DropboxError) in
            try client.uploadFile(commit, body: body, fileContentHash: fileContentHash, progress: progress, cancel: cancel)
        }
    }

    public func createFolder(path: String) async throws(DropboxError) -> FolderMetadata {
        try await run { client, _ throws(DropboxError) in try client.createFolder(path: path) }
    }

    public func delete(path: String) async throws(DropboxError) -> Metadata {
        try await run { client, _ throws(DropboxError) in try client.delete(path: path) }
    }

    public func move(from: String, to: String) async throws(DropboxError) -> Metadata {
        try await run { client, _ throws(DropboxError) in try client.move(from: from, to: to) }
    }

    public func currentAccount() async throws(DropboxError) -> FullAccount {
        try await run { client, _ throws(DropboxError) in try client.currentAccount() }
    }

    public func spaceUsage() async throws(DropboxError) -> SpaceUsage {
        try await run { client, _ throws(DropboxError) in try client.spaceUsage() }
    }
}
