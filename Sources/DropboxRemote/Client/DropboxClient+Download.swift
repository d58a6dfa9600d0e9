/// `files/download`: a whole file or a byte range, streamed to a sink, resumed after failures.
///
/// Each attempt asks for the bytes not yet delivered (`Range: bytes=<reached>-<end>`), so a
/// transfer interrupted at 900 MiB continues from there. A resumed attempt must serve the same rev
/// as the first one, otherwise the sink would get a splice of two versions: that ends in
/// `.contentChanged`. A server that ignores Range (200 instead of 206) is handled by skipping.
import Foundation

extension DropboxClient {
    /// Streams the file at `path` (path, `id:` or `rev:`), or bytes `range` of it, into `sink`.
    /// Returns the file's metadata (from `Dropbox-API-Result`).
    @discardableResult
    public func download(path: String, range: Range<UInt64>? = nil, progress: TransferProgress? = nil,
                         cancel: CancelHandle? = nil, sink: DownloadSink) throws(DropboxError) -> FileMetadata {
        let route = Route.download("files/download", errors: .lookup)
        if let range, range.isEmpty {
            // Nothing to transfer; an empty Range header is not expressible in HTTP.
            guard case .file(let file) = try getMetadata(path: path) else { throw .route(.path(.notFile), summary: "path/not_file/") }
            return file
        }
        return try withoutActuallyEscaping(sink) { (sink) throws(DropboxError) -> FileMetadata in
            try resumingDownload(route: route, path: path, range: range, progress: progress, cancel: cancel, sink: sink)
        }
    }

    private func resumingDownload(route: Route, path: String, range: Range<UInt64>?, progress: TransferProgress?,
                                  cancel: CancelHandle?, sink: @escaping DownloadSink) throws(DropboxError) -> FileMetadata {
        var delivered: UInt64 = 0        // bytes handed to the sink, over all attempts
        var firstRev: String?
        let tracker = MonotonicProgressBox(progress, total: range.map { $0.upperBound - $0.lowerBound } ?? 0)

        return try withRetries(route: route, cancel: cancel) { (context) throws(DropboxError) -> FileMetadata in
            if context.number > 0, delivered > 0 { statistics.update { $0.downloadResumes += 1 } }
            let start = (range?.lowerBound ?? 0) + delivered
            // Bytes this attempt must deliver; nil = to the end of the file.
            let wanted: UInt64? = range.map { $0.upperBound - start }
            let header: (start: UInt64, end: UInt64?)? = (range != nil || delivered > 0)
                ? (start, range.map { $0.upperBound - 1 }) : nil
            var skip: UInt64 = 0          // bytes to drop when the server ignored Range
            var thisAttempt: UInt64 = 0
            var reachedEnd = false        // all wanted bytes delivered; anything more is surplus
            var metadata: FileMetadata?

            let onStart = { (status: Int, headers: [String: String]) -> DropboxError? in
                if header != nil && status == 200 { skip = start }
                guard let result = headers["dropbox-api-result"].flatMap({ try? JSON.parse(Data($0.utf8)) }),
                      let file = try? FileMetadata(json: result) else { return nil }
                metadata = file
                if firstRev == nil {
                    firstRev = file.rev
                    if tracker.total == 0 { tracker.total = file.size }
                } else if file.rev != firstRev {
                    return .contentChanged(path: path)
                }
                return nil
            }
            let guardedSink: DownloadSink = { buffer in
                if reachedEnd { return false }  // surplus from a server that ignored Range: stop it
                var buffer = buffer
                if skip > 0 {
                    let drop = Int(min(UInt64(buffer.count), skip))
                    skip -= UInt64(drop)
                    buffer = UnsafeRawBufferPointer(rebasing: buffer[drop...])
                    if buffer.isEmpty { return true }
                }
                var isLast = false
                if let wanted, UInt64(buffer.count) >= wanted - thisAttempt {
                    buffer = UnsafeRawBufferPointer(rebasing: buffer[..<Int(wanted - thisAttempt)])
                    isLast = true
                }
                guard sink(buffer) else { return false }
                reachedEnd = isLast
                thisAttempt += UInt64(buffer.count)
                delivered += UInt64(buffer.count)
                tracker.update(delivered)
                return true
            }
            do throws(DropboxError) {
                let result = try attempt(route, arg: ["path": .string(path)], context: context, range: header,
                                         sink: guardedSink, cancel: cancel, onResponseStart: onStart)
                let file = try FileMetadata(json: result.result)
                if let firstRev, file.rev != firstRev { throw .contentChanged(path: path) }
                return file
            } catch .cancelled where reachedEnd && cancel?.isCancelled != true {
                // We stopped the surplus ourselves: every wanted byte was delivered.
                guard let metadata else { throw .unexpectedResponse("download without Dropbox-API-Result") }
                return metadata
            }
        }
    }

    /// Downloads into memory; for small files and tests.
    public func downloadData(path: String, range: Range<UInt64>? = nil, cancel: CancelHandle? = nil) throws(DropboxError) -> (FileMetadata, Data) {
        var data = Data()
        let metadata = try download(path: path, range: range, cancel: cancel) { buffer in
            data.append(buffer.assumingMemoryBound(to: UInt8.self))
            return true
        }
        return (metadata, data)
    }
}

/// Progress shared by callbacks on one thread (download) or several (parallel appends): `done`
/// reported only when it grows. Parallel appends can share one: a figure is decided and reported
/// under `reporting`, so a slow callback for a smaller figure cannot land after a larger one.
final class MonotonicProgressBox: @unchecked Sendable {
    // Safe: `reported` is only touched under `reporting`, `_total` only under `lock`.
    // Lock order: `reporting`, then `lock` (the callback may read `total`; it must not call `update`).
    private let report: TransferProgress?
    private let reporting = NSLock()
    private let lock = NSLock()
    private var reported: UInt64 = 0
    private var _total: UInt64

    init(_ report: TransferProgress?, total: UInt64) { self.report = report; self._total = total }

    var total: UInt64 {
        get { lock.withLock { _total } }
        set { lock.withLock { _total = newValue } }
    }

    func update(_ done: UInt64) {
        guard let report else { return }
        reporting.withLock {
            guard done > reported else { return }
            reported = done
            report(done, total)
        }
    }
}
