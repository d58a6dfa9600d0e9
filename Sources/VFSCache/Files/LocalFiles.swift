/// `LocalFiles`: what the facade knows about files written through the mount, by inode: the
/// staging file holding their current bytes, whether a writer has changed them since the last
/// journaled close, the generation to wait for in fsync, and the open write handles.
///
/// The write-back engine owns the journal and the uploads; this registry only remembers what the
/// facade needs between FUSE calls (the engine works by path, FUSE by inode and handle).
import ContentHash
import Foundation
import Synchronization

/// One file with local writes. Its `lock` serialises the facade's operations on the file (the
/// first write fills the staging file from the old content; later writes must wait for that).
final class LocalFile: @unchecked Sendable {
    // @unchecked: every `var` is only touched with `lock` held.
    let ino: InodeNumber
    let lock = NSLock()
    /// The staging file with the file's latest bytes (kept after the commit too: its fd stays
    /// readable, and a later write copies from it instead of downloading).
    var staging: StagingFile?
    /// `beginWrite` was called since the last `close` of the engine: bytes are changing.
    var writing = false
    /// Generation of the last journaled close (0: none yet).
    var generation: UInt64 = 0
    /// Times set by utimens, used as client_modified at the next close (nil: the close's time).
    var mtime: Date?
    /// Open handles that may write (create, or opened for writing).
    var writers = 0
    /// Read handles of the server's bytes (`OpenFile`) that follow this file's local writes.
    var readers = 0
    /// The kernel's pages may hold bytes the path no longer shows (ours became a conflicted
    /// copy): the next open must drop them (`VFS.pagesFollowLocalWrites`).
    var kernelPagesStale = false
    /// Periods of changes begun so far (`VFS.beginWriteAndFill`): a reader that opened the
    /// server's bytes reads these local bytes once the count moved past the one it opened at.
    var writePeriods: UInt64 = 0
    /// How far the file has been written contiguously from byte 0 (for streaming uploads);
    /// nil once a write broke the sequence.
    private(set) var sequentialPrefix: UInt64? = 0
    /// SHA-256 of the 4 MiB blocks of that prefix, fed with each write's bytes while they are in
    /// memory (PrefixHash.swift), so a large file's commit does not read them back.
    private var prefixDigester: BlockDigester?
    /// Unlinked while open: writes still land in the (now anonymous) staging file, but nothing
    /// is journaled any more.
    var unlinked = false
    /// The staging file's stamp when it was last journaled: the kernel's own writes (FUSE
    /// passthrough) are only seen as a different stamp at the next flush, fsync or release.
    var journaledStamp: ChangeStamp?
    /// Opens that may write and that the kernel serves by itself, and their staging file: while
    /// any is left, the size and mtime shown are the staging file's (the kernel writes it behind
    /// our back). Its own lock, so attributes can be read without `lock`.
    let kernelWriters = Mutex<(count: Int, staging: StagingFile?)>((0, nil))

    /// The staging file's stamp while the kernel writes it (nil otherwise).
    func kernelWrittenStamp() -> ChangeStamp? {
        guard let staging = kernelWriters.withLock({ $0.count > 0 ? $0.staging : nil }) else { return nil }
        return try? staging.changeStamp()
    }

    init(ino: InodeNumber) { self.ino = ino }

    /// The file's bytes start over from byte 0 (created, or truncated to 0).
    func restartSequence() {
        sequentialPrefix = 0
        prefixDigester = nil
    }

    /// A write or truncate changed bytes out of order: no more streaming or prefix hashing.
    func breakSequence() {
        sequentialPrefix = nil
        prefixDigester = nil
    }

    /// `data` was written at `sequentialPrefix`: advances it and hashes the bytes on this thread
    /// (they are in the cache now). Returns the blocks this write completed, and the digest of
    /// the partial block it ended in (so a file written in order is never read back to hash).
    func extendSequence(_ data: UnsafeRawBufferPointer) -> CompletedBlocks {
        guard let prefix = sequentialPrefix else { return CompletedBlocks(firstIndex: 0, digests: []) }
        if prefixDigester == nil, prefix == 0 { prefixDigester = BlockDigester() }
        sequentialPrefix = prefix + UInt64(data.count)
        guard let digester = prefixDigester else { return CompletedBlocks(firstIndex: 0, digests: []) }
        let first = digester.completedBlocks
        let digests = digester.update(data)
        return CompletedBlocks(firstIndex: first, digests: digests, tailDigest: digester.partialBlockDigest())
    }

    /// Runs `wait` with the lock let go, from inside `withLock`: for the few waits on something
    /// that itself needs this lock (the facade's prepareWrite and create). The caller reads again
    /// whatever it read under the lock before.
    func waitUnlocked(_ wait: () -> Void) {
        lock.unlock()
        wait()
        lock.lock()
    }

    func withLock<T, E: Error>(_ body: () throws(E) -> T) throws(E) -> T {
        lock.lock(); defer { lock.unlock() }
        return try body()
    }
}

/// An open handle that writes, or that reads a file whose latest bytes are local.
final class WriteHandle: Sendable {
    let ino: InodeNumber
    let file: LocalFile
    let mayWrite: Bool
    let append: Bool
    /// For reads before the first write of an `O_RDWR` open of a clean file: the remote bytes.
    let remoteView: OpenFile?
    /// The local bytes this handle saw last: the staging file it opened (a pending upload) or last
    /// wrote to. Should the path come to show another client's version (ours became a conflicted
    /// copy, or was changed elsewhere after its commit), the handle reads these and writes on
    /// them, never on the other version (`VFS.beginWriteAndFill`).
    let localView: Mutex<StagingFile?>
    /// This handle changed the file since its last journaled close (flush/release journal it).
    let wrote = Atomic<Bool>(false)
    /// This handle changed the file at some point: only such a handle's flush reports the file's
    /// failed close or upload (a reader's close never fails for it).
    let hasWritten = Atomic<Bool>(false)

    /// The kernel serves this open by itself (FUSE passthrough): its writes never reach us, and
    /// are found by the staging file's stamp instead.
    let servedByKernel = Atomic<Bool>(false)
    /// The staging file the engine keeps for this open (`WriteBackEngine.retainStaging`).
    let retainedStaging = Mutex<StagingFile?>(nil)

    /// Records a change made through this handle (a write, a truncate, the create itself).
    func noteWrite() {
        wrote.store(true, ordering: .relaxed)
        hasWritten.store(true, ordering: .relaxed)
    }

    init(ino: InodeNumber, file: LocalFile, mayWrite: Bool, append: Bool, remoteView: OpenFile?, localView: StagingFile? = nil) {
        self.ino = ino; self.file = file; self.mayWrite = mayWrite; self.append = append; self.remoteView = remoteView
        self.localView = Mutex(localView)
    }
}

final class LocalFiles: Sendable {
    private struct State: ~Copyable {
        var files: [InodeNumber: LocalFile] = [:]
        var handles: [HandleID: WriteHandle] = [:]
    }
    private let state = Mutex(State())

    /// The file's record, created on first use.
    func file(_ ino: InodeNumber) -> LocalFile {
        state.withLock { state in
            if let file = state.files[ino] { return file }
            let file = LocalFile(ino: ino)
            state.files[ino] = file
            return file
        }
    }

    func existing(_ ino: InodeNumber) -> LocalFile? { state.withLock { $0.files[ino] } }

    /// Forgets a file once nothing refers to it any more (committed, no handle open).
    func dropIfIdle(_ ino: InodeNumber) {
        state.withLock { state in
            guard let file = state.files[ino] else { return }
            let idle = file.withLock { !file.writing && file.writers == 0 && file.readers == 0 }
            let open = state.handles.values.contains { $0.ino == ino }
            if idle && !open { state.files[ino] = nil }
        }
    }

    /// A read of the server's bytes opens: the file's record (made if needed, and kept while
    /// the reader is open) and its periods of changes so far. Lock order: the registry's, then
    /// the file's (as in `dropIfIdle`).
    func attachReader(_ ino: InodeNumber) -> (file: LocalFile, periods: UInt64) {
        state.withLock { state in
            let file = state.files[ino] ?? LocalFile(ino: ino)
            state.files[ino] = file
            return (file, file.withLock { file.readers += 1; return file.writePeriods })
        }
    }

    /// The reader attached by `attachReader` closed.
    func detachReader(_ file: LocalFile) {
        file.withLock { file.readers -= 1 }
        dropIfIdle(file.ino)
    }

    func forget(_ ino: InodeNumber) { _ = state.withLock { $0.files.removeValue(forKey: ino) } }

    func add(_ handle: WriteHandle, as id: HandleID) { state.withLock { $0.handles[id] = handle } }
    func handle(_ id: HandleID) -> WriteHandle? { state.withLock { $0.handles[id] } }
    func removeHandle(_ id: HandleID) -> WriteHandle? { state.withLock { $0.handles.removeValue(forKey: id) } }
    var handleCount: Int { state.withLock { $0.handles.count } }
}
