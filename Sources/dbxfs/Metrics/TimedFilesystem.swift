/// The FUSE operations timed for the metrics: a `FilesystemOperations` in front of the mount's
/// own, which measures each call (its latency, and whether it failed) and passes it on. Every
/// mount has one except with the hidden `--no-metrics` (which pays nothing); an operation costs
/// two clock reads and two or three atomic adds (about 0.1 µs: docs/STATUS.md, "Cost").
import Dispatch
import VFSCache

/// The operations counted, one label value each (bounded: the FUSE operations dbxfs serves).
enum FuseOperation: Int, CaseIterable, Sendable {
    case lookup, forget, getattr, setattr, opendir, readdir, releasedir, open, read, write, flush, fsync, release
    case create, mkdir, unlink, rmdir, rename, statfs, getxattr, listxattr

    var label: String { "\(self)" }
}

final class TimedFilesystem: FilesystemOperations, Sendable {
    private let inner: any FilesystemOperations
    private let metrics: MountMetrics

    init(_ inner: any FilesystemOperations, metrics: MountMetrics) {
        self.inner = inner
        self.metrics = metrics
    }

    @inline(__always)
    private func timed<T>(_ operation: FuseOperation, _ body: () throws(Errno) -> T) throws(Errno) -> T {
        let start = DispatchTime.now().uptimeNanoseconds
        do {
            let result = try body()
            metrics.recordOperation(operation, sinceUptimeNanoseconds: start, failed: false)
            return result
        } catch {
            metrics.recordOperation(operation, sinceUptimeNanoseconds: start, failed: true)
            throw error
        }
    }

    @inline(__always)
    private func timed(_ operation: FuseOperation, _ body: () -> Void) {
        let start = DispatchTime.now().uptimeNanoseconds
        body()
        metrics.recordOperation(operation, sinceUptimeNanoseconds: start, failed: false)
    }

    func lookup(parent: InodeNumber, name: String) throws(Errno) -> EntryReply {
        try timed(.lookup) { () throws(Errno) in try inner.lookup(parent: parent, name: name) }
    }
    func forget(_ ino: InodeNumber, count: UInt64) { timed(.forget) { inner.forget(ino, count: count) } }
    func getattr(_ ino: InodeNumber) throws(Errno) -> (FileAttributes, timeout: Double) {
        try timed(.getattr) { () throws(Errno) in try inner.getattr(ino) }
    }
    func setattr(_ ino: InodeNumber, changes: AttributeChanges, handle: HandleID?) throws(Errno) -> FileAttributes {
        try timed(.setattr) { () throws(Errno) in try inner.setattr(ino, changes: changes, handle: handle) }
    }
    func openDirectory(_ ino: InodeNumber) throws(Errno) -> HandleID {
        try timed(.opendir) { () throws(Errno) in try inner.openDirectory(ino) }
    }
    func readDirectory(_ ino: InodeNumber, handle: HandleID, offset: Int, limit: Int) throws(Errno) -> [DirectoryEntry] {
        try timed(.readdir) { () throws(Errno) in try inner.readDirectory(ino, handle: handle, offset: offset, limit: limit) }
    }
    func releaseDirectory(_ ino: InodeNumber, handle: HandleID) {
        timed(.releasedir) { inner.releaseDirectory(ino, handle: handle) }
    }
    func open(_ ino: InodeNumber, flags: OpenFlags) throws(Errno) -> OpenReply {
        try timed(.open) { () throws(Errno) in try inner.open(ino, flags: flags) }
    }
    func read(_ ino: InodeNumber, handle: HandleID, offset: UInt64, size: Int) throws(Errno) -> [UInt8] {
        try timed(.read) { () throws(Errno) in try inner.read(ino, handle: handle, offset: offset, size: size) }
    }
    /// Includes `body` (the glue's reply to the kernel), as the reader waits for that too.
    func readPieces<R>(_ ino: InodeNumber, handle: HandleID, offset: UInt64, size: Int,
                       _ body: ([UnsafeRawBufferPointer]) -> R) throws(Errno) -> R {
        try timed(.read) { () throws(Errno) in try inner.readPieces(ino, handle: handle, offset: offset, size: size, body) }
    }
    func write(_ ino: InodeNumber, handle: HandleID, offset: UInt64, data: UnsafeRawBufferPointer) throws(Errno) -> Int {
        try timed(.write) { () throws(Errno) in try inner.write(ino, handle: handle, offset: offset, data: data) }
    }
    func flush(_ ino: InodeNumber, handle: HandleID) throws(Errno) {
        try timed(.flush) { () throws(Errno) in try inner.flush(ino, handle: handle) }
    }
    func fsync(_ ino: InodeNumber, handle: HandleID?) throws(Errno) {
        try timed(.fsync) { () throws(Errno) in try inner.fsync(ino, handle: handle) }
    }
    func release(_ ino: InodeNumber, handle: HandleID) { timed(.release) { inner.release(ino, handle: handle) } }
    func servedByKernel(_ ino: InodeNumber, handle: HandleID) { inner.servedByKernel(ino, handle: handle) }
    func create(parent: InodeNumber, name: String, flags: OpenFlags) throws(Errno) -> (EntryReply, OpenReply) {
        try timed(.create) { () throws(Errno) in try inner.create(parent: parent, name: name, flags: flags) }
    }
    func mkdir(parent: InodeNumber, name: String) throws(Errno) -> EntryReply {
        try timed(.mkdir) { () throws(Errno) in try inner.mkdir(parent: parent, name: name) }
    }
    func unlink(parent: InodeNumber, name: String) throws(Errno) {
        try timed(.unlink) { () throws(Errno) in try inner.unlink(parent: parent, name: name) }
    }
    func rmdir(parent: InodeNumber, name: String) throws(Errno) {
        try timed(.rmdir) { () throws(Errno) in try inner.rmdir(parent: parent, name: name) }
    }
    func rename(parent: InodeNumber, name: String, newParent: InodeNumber, newName: String, flags: RenameFlags) throws(Errno) {
        try timed(.rename) { () throws(Errno) in
            try inner.rename(parent: parent, name: name, newParent: newParent, newName: newName, flags: flags)
        }
    }
    func statfs() throws(Errno) -> FilesystemStats { try timed(.statfs) { () throws(Errno) in try inner.statfs() } }
    func getxattr(_ ino: InodeNumber, name: String) throws(Errno) -> [UInt8] {
        try timed(.getxattr) { () throws(Errno) in try inner.getxattr(ino, name: name) }
    }
    func listxattr(_ ino: InodeNumber) throws(Errno) -> [String] {
        try timed(.listxattr) { () throws(Errno) in try inner.listxattr(ino) }
    }
    func displayName(of ino: InodeNumber) -> String? { inner.displayName(of: ino) }
}
