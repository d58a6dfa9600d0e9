/// A `RemoteStore` wrapper that records the downloads passing through it (ranges, and how many
/// ran at once), optionally slowing each one down, to test read-ahead parallelism, or holding
/// each one after its first bytes until the test lets it go on, to test what readers get meanwhile.
import Foundation
import Synchronization
@testable import VFSCache

final class ObservedRemote: RemoteStore, Sendable {
    let inner: any RemoteStore
    let downloadDelay: TimeInterval
    private struct State { var ranges: [Range<UInt64>] = []; var running = 0; var maxRunning = 0 }
    private let state = Mutex(State())

    init(_ inner: any RemoteStore, downloadDelay: TimeInterval = 0) {
        self.inner = inner
        self.downloadDelay = downloadDelay
    }

    /// Delays of the next small downloads (128 KiB at most: random reads' fragments), one each,
    /// before `downloadDelay` applies again: a connection's handshakes make its first download
    /// slow. Larger downloads (background ones) neither wait for these nor use them up.
    let nextFragmentDelays = Mutex<[TimeInterval]>([])

    /// While set, each download delivers `bytes`, then waits for `gate` (one signal per download).
    let holdAfter = Mutex<(bytes: Int, gate: DispatchSemaphore)?>(nil)

    var downloadedRanges: [Range<UInt64>] { state.withLock { $0.ranges } }
    var maxConcurrentDownloads: Int { state.withLock { $0.maxRunning } }
    func reset() { state.withLock { $0 = State() } }

    func download(path: String, rev: String?, range: Range<UInt64>?, sink: (UnsafeRawBufferPointer) -> Bool) throws(RemoteError) {
        state.withLock {
            $0.ranges.append(range ?? 0..<UInt64.max)
            $0.running += 1
            $0.maxRunning = max($0.maxRunning, $0.running)
        }
        defer { state.withLock { $0.running -= 1 } }
        let small = range.map { $0.count <= 128 << 10 } ?? false
        let delay = nextFragmentDelays.withLock { !small || $0.isEmpty ? downloadDelay : $0.removeFirst() }
        if delay > 0 { Thread.sleep(forTimeInterval: delay) }
        guard let hold = holdAfter.withLock({ $0 }) else { return try inner.download(path: path, rev: rev, range: range, sink: sink) }
        var sent = 0
        try inner.download(path: path, rev: rev, range: range) { chunk in
            var rest = chunk
            if sent < hold.bytes {
                let count = min(rest.count, hold.bytes - sent)
                guard sink(UnsafeRawBufferPointer(rebasing: rest[..<count])) else { return false }
                sent += count
                rest = UnsafeRawBufferPointer(rebasing: rest[count...])
                if sent == hold.bytes { hold.gate.wait() }
            }
            return rest.isEmpty || sink(rest)
        }
    }

    func metadata(path: String) throws(RemoteError) -> RemoteEntry? { try inner.metadata(path: path) }
    func listFolder(path: String, recursive: Bool, limit: Int?) throws(RemoteError) -> RemoteListPage {
        try inner.listFolder(path: path, recursive: recursive, limit: limit)
    }
    func listFolderContinue(cursor: String) throws(RemoteError) -> RemoteListPage { try inner.listFolderContinue(cursor: cursor) }
    func latestCursor(path: String, recursive: Bool) throws(RemoteError) -> String { try inner.latestCursor(path: path, recursive: recursive) }
    func longpoll(cursor: String, timeout: Int) throws(RemoteError) -> (changes: Bool, backoff: Int?) { try inner.longpoll(cursor: cursor, timeout: timeout) }
    func upload(file: URL, length: UInt64, commit: RemoteCommit, progress: RemoteProgress?) throws(RemoteError) -> RemoteEntry {
        try inner.upload(file: file, length: length, commit: commit, progress: progress)
    }
    func startSession(concurrent: Bool) throws(RemoteError) -> String { try inner.startSession(concurrent: concurrent) }
    func appendSession(id: String, file: URL, offset: UInt64, length: UInt64, close: Bool, progress: RemoteProgress?) throws(RemoteError) {
        try inner.appendSession(id: id, file: file, offset: offset, length: length, close: close, progress: progress)
    }
    func appendSessionChecked(id: String, bytes: Data, offset: UInt64, contentHash: String) throws(RemoteError) {
        try inner.appendSessionChecked(id: id, bytes: bytes, offset: offset, contentHash: contentHash)
    }
    func finishBatch(_ entries: [(session: RemoteUploadedSession, commit: RemoteCommit)]) throws(RemoteError) -> [Result<RemoteEntry, RemoteError>] {
        try inner.finishBatch(entries)
    }
    func createFolder(path: String) throws(RemoteError) -> RemoteEntry { try inner.createFolder(path: path) }
    func delete(path: String) throws(RemoteError) { try inner.delete(path: path) }
    func move(from: String, to: String) throws(RemoteError) -> RemoteEntry { try inner.move(from: from, to: to) }
    func copy(from: String, to: String) throws(RemoteError) -> RemoteEntry { try inner.copy(from: from, to: to) }
    func spaceUsage() throws(RemoteError) -> (used: UInt64, allocated: UInt64) { try inner.spaceUsage() }
}
