/// The staging area: one local file per dirty Dropbox file, under `<cacheDir>/staging/`, holding the
/// bytes written through the mount until Dropbox has confirmed their commit.
///
/// Rules that make it crash-safe (see docs/WRITEBACK.md):
/// - a staging file is fsync'ed before the journal marks it ready for upload;
/// - it is deleted only after Dropbox confirmed the commit with the expected content hash;
/// - a full disk is reported as `Errno.noSpace` by the write that hit it, never dropped.
import CFileSync
import ContentHash
import Foundation
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

public final class StagingArea: Sendable {
    public let directory: URL

    /// Creates `<cacheDirectory>/staging` if needed.
    public init(cacheDirectory: URL) throws(Errno) {
        directory = cacheDirectory.appendingPathComponent("staging", isDirectory: true)
        if mkdir(directory.path, 0o700) != 0 && errno != EEXIST { throw Errno(errno) }
    }

    /// A new, empty staging file with a unique random name.
    public func create() throws(Errno) -> StagingFile {
        let name = hex(SecureRandom.bytes(12)) + ".data"
        return try StagingFile(url: url(of: name), name: name, create: true)
    }

    /// Opens an existing staging file (after a restart).
    public func open(name: String) throws(Errno) -> StagingFile {
        try StagingFile(url: url(of: name), name: name, create: false)
    }

    public func url(of name: String) -> URL { directory.appendingPathComponent(name, isDirectory: false) }

    public func exists(name: String) -> Bool { access(url(of: name).path, F_OK) == 0 }

    /// Deletes a staging file; a missing file is not an error.
    public func remove(name: String) {
        if unlink(url(of: name).path) != 0 && errno != ENOENT {
            WriteBackLog.warning("cannot delete staging file \(name): \(Errno(errno))")
        }
    }

    /// Where the bytes of `generation` wait once Dropbox committed them with our content hash,
    /// until the facade adopts them into the disk cache (`handOver`). A name of its own, so the
    /// next staging file of the path never meets it; generations are unique and only grow.
    public func committedBytes(generation: UInt64) -> URL {
        directory.appendingPathComponent("\(generation).committed", isDirectory: false)
    }

    /// Moves a committed staging file to `committedBytes(generation:)` instead of deleting it
    /// (the same cost: one directory update). Returns false if it could not (then it is deleted).
    public func handOver(name: String, generation: UInt64) -> Bool {
        if rename(url(of: name).path, committedBytes(generation: generation).path) == 0 { return true }
        remove(name: name)
        return false
    }

    /// Deletes committed bytes nobody adopted: a crash (or an unmount) between the commit and the
    /// adoption loses only that copy in the cache. Run at start-up.
    public func removeCommittedLeftovers() {
        let names = (try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []
        for name in names where name.hasSuffix(".committed") { unlink(directory.appendingPathComponent(name).path) }
    }

    /// Names of every staging file present, for the orphan sweep at start-up.
    public func names() -> [String] {
        (try? FileManager.default.contentsOfDirectory(atPath: directory.path))?.filter { $0.hasSuffix(".data") } ?? []
    }

    /// fsync of the staging directory, so created and deleted names are durable too.
    public func syncDirectory() {
        let fd = Glibc.open(directory.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
        guard fd >= 0 else { return }
        _ = fsync(fd)
        Glibc.close(fd)
    }
}

/// One open staging file: positional reads and writes on a file descriptor, shared by the
/// facade's write/read calls (read-your-writes) and the uploader. Thread-safe because every
/// operation is a single positional syscall on an fd that lives as long as the object.
public final class StagingFile: Sendable {
    public let url: URL
    /// File name inside the staging directory (what the journal records).
    public let name: String
    private let fd: Int32
    /// The lowest offset written or truncated to since `takeLowestChange` last ran (UInt64.max:
    /// none). Lets the hash computed while the file is written (PrefixHash.swift) prove that the
    /// bytes it hashed are still the bytes on disk, whatever the facade reports.
    private let lowestChange = Atomic<UInt64>(.max)
    /// How far a streaming upload fed by the facade's writes has read the file to send it
    /// (StreamingUpload.swift), and whether a write or truncate below that landed afterwards:
    /// then the session holds bytes the file no longer has, whatever the facade reported.
    private let streamedUpTo = Atomic<UInt64>(0)
    private let changedBelowStreamed = Atomic<Bool>(false)

    fileprivate init(url: URL, name: String, create: Bool) throws(Errno) {
        let flags = O_RDWR | O_CLOEXEC | (create ? (O_CREAT | O_EXCL) : 0)
        let fd = Glibc.open(url.path, flags, 0o600)
        guard fd >= 0 else { throw Errno(errno) }
        self.fd = fd; self.url = url; self.name = name
    }

    deinit { Glibc.close(fd) }

    /// Writes all of `data` at `offset`, extending the file as needed. ENOSPC/EDQUOT → `.noSpace`.
    public func write(at offset: UInt64, _ data: UnsafeRawBufferPointer) throws(Errno) {
        if let failure = writeUpTo(at: offset, data).failure { throw failure }
    }

    /// Writes as much of `data` as goes in, as write(2) does: a disk that fills up part way
    /// gives a short count (so the file's size and what the writer was told agree); an error
    /// before any byte went in is thrown.
    public func writePrefix(at offset: UInt64, _ data: UnsafeRawBufferPointer) throws(Errno) -> Int {
        let (done, failure) = writeUpTo(at: offset, data)
        if let failure, done == 0 { throw failure }
        return done
    }

    private func writeUpTo(at offset: UInt64, _ data: UnsafeRawBufferPointer) -> (done: Int, failure: Errno?) {
        var done = 0
        var failure: Errno?
        while done < data.count {
            let n = pwrite(fd, data.baseAddress! + done, data.count - done, off_t(offset) + off_t(done))
            if n < 0 {
                if errno == EINTR { continue }
                failure = Self.classify(errno)
                break
            }
            done += n
        }
        // After the bytes are in: a hash read that raced this write is caught by the next take.
        if done > 0 || failure == nil { noteChange(at: offset) }
        return (done, failure)
    }

    /// The lowest offset changed since the previous call, and starts a new period.
    func takeLowestChange() -> UInt64 { lowestChange.exchange(.max, ordering: .sequentiallyConsistent) }

    /// A stream starts (nothing read yet), or is about to read its bytes up to `end`. Called
    /// before the read: a change that lands after it below `end` is caught (writes are
    /// checked after their bytes are in, so either the read sees them or they see this).
    func streamStarts() {
        streamedUpTo.store(0, ordering: .sequentiallyConsistent)
        changedBelowStreamed.store(false, ordering: .sequentiallyConsistent)
    }
    func streamReads(upTo end: UInt64) {
        streamedUpTo.raise(to: end)
    }
    /// Whether a write or truncate landed below what the stream had read, since it started.
    var changedUnderStream: Bool { changedBelowStreamed.load(ordering: .sequentiallyConsistent) }

    private func noteChange(at offset: UInt64) {
        if offset < streamedUpTo.load(ordering: .sequentiallyConsistent) {
            changedBelowStreamed.store(true, ordering: .sequentiallyConsistent)
        }
        lowestChange.lower(to: offset)
    }

    /// Writes `data` at `offset` of a file being filled for the first time, leaving each 64 KiB
    /// piece of zeros unwritten: on a fresh file that is a hole, which reads as zeros, so a
    /// sparse file's copy stays sparse (xfstests' fsstress makes 1-2 GB sparse files; written out
    /// whole, their copies took the staging area to 20 GB). The caller sets the file's length
    /// (`truncate`) once it is filled, for the zeros at its end.
    public func fill(at offset: UInt64, _ data: UnsafeRawBufferPointer) throws(Errno) {
        let piece = 64 * 1024
        var start = 0
        while start < data.count {
            let end = min(start + piece, data.count)
            let slice = UnsafeRawBufferPointer(rebasing: data[start..<end])
            if !Self.isAllZeros(slice) { try write(at: offset + UInt64(start), slice) }
            start = end
        }
    }

    public func fill(at offset: UInt64, _ bytes: [UInt8]) throws(Errno) {
        try Self.withBytes(of: bytes) { (raw) throws(Errno) in try fill(at: offset, raw) }
    }

    private static func isAllZeros(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var at = 0
        while at + 8 <= bytes.count {
            if bytes.loadUnaligned(fromByteOffset: at, as: UInt64.self) != 0 { return false }
            at += 8
        }
        while at < bytes.count {
            if bytes[at] != 0 { return false }
            at += 1
        }
        return true
    }

    public func write(at offset: UInt64, _ bytes: [UInt8]) throws(Errno) {
        try Self.withBytes(of: bytes) { (raw) throws(Errno) in try write(at: offset, raw) }
    }

    /// `body` over the bytes of an array, keeping its typed error (`withUnsafeBytes` rethrows
    /// untyped).
    private static func withBytes(of bytes: [UInt8], _ body: (UnsafeRawBufferPointer) throws(Errno) -> Void) throws(Errno) {
        do {
            try bytes.withUnsafeBytes { try body($0) }
        } catch let error as Errno {
            throw error
        } catch {
            throw .io
        }
    }

    /// Reads into `buffer` from `offset` until it is full or the file ends; returns the count.
    func read(at offset: UInt64, into buffer: UnsafeMutableRawBufferPointer) throws(Errno) -> Int {
        var done = 0
        while done < buffer.count {
            let n = pread(fd, buffer.baseAddress! + done, buffer.count - done, off_t(offset) + off_t(done))
            if n < 0 {
                if errno == EINTR { continue }
                throw Errno(errno)
            }
            if n == 0 { break }
            done += n
        }
        return done
    }

    /// Up to `count` bytes from `offset` (fewer at the end of the file).
    public func read(at offset: UInt64, count: Int) throws(Errno) -> [UInt8] {
        var out = [UInt8](repeating: 0, count: count)
        let done = out.withUnsafeMutableBytes { buffer in Result { () throws(Errno) in try read(at: offset, into: buffer) } }
        out.removeSubrange(try done.get()...)
        return out
    }

    /// Sets the size (truncate or sparse extension).
    public func truncate(to size: UInt64) throws(Errno) {
        if ftruncate(fd, off_t(size)) != 0 { throw Self.classify(errno) }
        noteChange(at: size)
    }

    public func size() throws(Errno) -> UInt64 {
        var info = stat()
        if fstat(fd, &info) != 0 { throw Errno(errno) }
        return UInt64(info.st_size)
    }

    /// What changes with every write or truncate, by anyone (also the kernel writing the file by
    /// itself, FUSE passthrough): size, mtime and ctime. Linux ≥ 6.13 gives a ctime read here a
    /// fine-grained successor on the next change (multigrain timestamps, ext4/xfs/btrfs/tmpfs), so
    /// a write right after this call still changes the stamp.
    public func changeStamp() throws(Errno) -> ChangeStamp {
        var info = stat()
        if fstat(fd, &info) != 0 { throw Errno(errno) }
        return ChangeStamp(size: UInt64(info.st_size),
                           modified: Double(info.st_mtim.tv_sec) + Double(info.st_mtim.tv_nsec) / 1e9,
                           changeSeconds: Int64(info.st_ctim.tv_sec), changeNanoseconds: Int64(info.st_ctim.tv_nsec))
    }

    /// Starts the disk writeback of `count` bytes from `offset` and returns without waiting
    /// (sync_file_range, SYNC_FILE_RANGE_WRITE): a later `sync` then waits only for what was
    /// written after (StagingWriteback.swift). Durability still comes from `sync` alone; an error
    /// here changes nothing the writer was told, and a real one comes back from `sync`.
    public func startWriteback(from offset: UInt64, count: UInt64) {
        _ = dbxfs_start_writeback(fd, Int64(offset), Int64(count))
    }

    /// Makes the bytes durable (fdatasync). A deferred ENOSPC can surface here too.
    public func sync() throws(Errno) {
        if fdatasync(fd) != 0 { throw Self.classify(errno) }
    }

    private static func classify(_ code: Int32) -> Errno {
        code == ENOSPC || code == EDQUOT ? .noSpace : Errno(code)
    }
}

/// A staging file's size and times at one moment (`StagingFile.changeStamp`).
public struct ChangeStamp: Sendable, Equatable {
    public var size: UInt64
    /// mtime, seconds since 1970.
    public var modified: Double
    public var changeSeconds: Int64
    public var changeNanoseconds: Int64
    public var modifiedDate: Date { Date(timeIntervalSince1970: modified) }
}
