/// `CaseAliases`: what makes `mv readme.md README.md` (and `mv -T docs Docs`) reach Dropbox.
///
/// Dropbox names are case-insensitive, and so are the facade's lookups: `cat FILE.TXT` opens
/// `file.txt`. But if `FILE.TXT` answered with the inode of `file.txt`, the kernel would see a
/// rename between two names of one inode and, as POSIX says, do nothing without asking us. So a
/// lookup of a file by a name whose case differs from the name Dropbox shows answers a separate
/// inode number, an alias, the way a hard link would look: the kernel then sends the rename, and
/// the facade turns it into a case-only move on Dropbox. Everything else done through an alias
/// (stat, open, read, write, xattrs) is done on the real file, by the same handles and staging
/// file, so the bytes stay one; only the inode number in the answers is the alias's.
///
/// This is a decorator over any `FilesystemOperations`, so the facade stays unaware of it.
/// Folders get aliases too, so `mv -T docs Docs` works (a plain `mv docs Docs` sees a folder
/// `Docs` and asks to move `docs` into it, which is refused as a move into itself). A subfolder
/// reached through an aliased folder is the real subfolder, and the kernel moves its one dentry
/// between the two parents as it is used, as it does for a folder renamed on a network
/// filesystem. Opens through an alias never keep the page cache, since the kernel caches an
/// alias's pages apart from the real file's.
///
/// Alias numbers come from the top of the 64-bit range, far above anything the inode table hands
/// out. An alias lives while the kernel holds a lookup on it; its lookups are passed on to the
/// real inode too, so the real inode outlives every alias of it.
import Foundation

public final class CaseAliases: FilesystemOperations, @unchecked Sendable {
    // @unchecked: `aliases` and `byName` are only touched with `lock` held.
    private struct Alias {
        let target: InodeNumber
        let name: String
        var lookups: UInt64
    }

    public let inner: any FilesystemOperations
    private let lock = NSLock()
    private var aliases: [InodeNumber: Alias] = [:]
    /// (real inode, name as typed) → alias, so the same spelling keeps its inode number.
    private var byName: [AliasKey: InodeNumber] = [:]
    private var nextAlias: InodeNumber = 1 << 62

    private struct AliasKey: Hashable {
        let target: InodeNumber
        let name: String
    }

    public init(_ inner: any FilesystemOperations) { self.inner = inner }

    /// Aliases alive now (for tests).
    public var aliasCount: Int { lock.lock(); defer { lock.unlock() }; return aliases.count }

    private func real(_ ino: InodeNumber) -> InodeNumber {
        lock.lock(); defer { lock.unlock() }
        return aliases[ino]?.target ?? ino
    }

    private func isAlias(_ ino: InodeNumber) -> Bool {
        lock.lock(); defer { lock.unlock() }
        return aliases[ino] != nil
    }

    /// The entry as the kernel should see it for `name`: an alias when `name` is the entry's name
    /// in another case. Counts the lookup the entry carries.
    private func aliased(_ entry: EntryReply, name: String) -> EntryReply {
        guard let shown = inner.displayName(of: entry.attributes.ino), shown != name else {
            return entry
        }
        let target = entry.attributes.ino
        lock.lock(); defer { lock.unlock() }
        let key = AliasKey(target: target, name: name)
        let ino: InodeNumber
        if let existing = byName[key], aliases[existing] != nil {
            ino = existing
            aliases[ino]!.lookups += 1
        } else {
            ino = nextAlias
            nextAlias += 1
            aliases[ino] = Alias(target: target, name: name, lookups: 1)
            byName[key] = ino
        }
        var reply = entry
        reply.attributes.ino = ino
        return reply
    }

    private func relabel(_ attributes: FileAttributes, as ino: InodeNumber) -> FileAttributes {
        var copy = attributes
        copy.ino = ino
        return copy
    }

    // MARK: FilesystemOperations

    public func lookup(parent: InodeNumber, name: String) throws(Errno) -> EntryReply {
        aliased(try inner.lookup(parent: real(parent), name: name), name: name)
    }

    public func forget(_ ino: InodeNumber, count: UInt64) {
        lock.lock()
        guard var alias = aliases[ino] else {
            lock.unlock()
            inner.forget(ino, count: count)
            return
        }
        alias.lookups -= min(count, alias.lookups)
        if alias.lookups == 0 {
            aliases[ino] = nil
            byName[AliasKey(target: alias.target, name: alias.name)] = nil
        } else {
            aliases[ino] = alias
        }
        lock.unlock()
        inner.forget(alias.target, count: count)
    }

    public func getattr(_ ino: InodeNumber) throws(Errno) -> (FileAttributes, timeout: Double) {
        let (attributes, timeout) = try inner.getattr(real(ino))
        return (relabel(attributes, as: ino), timeout)
    }

    public func setattr(_ ino: InodeNumber, changes: AttributeChanges, handle: HandleID?) throws(Errno) -> FileAttributes {
        relabel(try inner.setattr(real(ino), changes: changes, handle: handle), as: ino)
    }

    public func openDirectory(_ ino: InodeNumber) throws(Errno) -> HandleID { try inner.openDirectory(real(ino)) }

    public func readDirectory(_ ino: InodeNumber, handle: HandleID, offset: Int, limit: Int) throws(Errno) -> [DirectoryEntry] {
        try inner.readDirectory(real(ino), handle: handle, offset: offset, limit: limit)
    }

    public func releaseDirectory(_ ino: InodeNumber, handle: HandleID) { inner.releaseDirectory(real(ino), handle: handle) }

    public func open(_ ino: InodeNumber, flags: OpenFlags) throws(Errno) -> OpenReply {
        var reply = try inner.open(real(ino), flags: flags)
        if isAlias(ino) { reply.keepCache = false }
        return reply
    }

    public func read(_ ino: InodeNumber, handle: HandleID, offset: UInt64, size: Int) throws(Errno) -> [UInt8] {
        try inner.read(real(ino), handle: handle, offset: offset, size: size)
    }

    public func readPieces<R>(_ ino: InodeNumber, handle: HandleID, offset: UInt64, size: Int,
                              _ body: ([UnsafeRawBufferPointer]) -> R) throws(Errno) -> R {
        try inner.readPieces(real(ino), handle: handle, offset: offset, size: size, body)
    }

    public func write(_ ino: InodeNumber, handle: HandleID, offset: UInt64, data: UnsafeRawBufferPointer) throws(Errno) -> Int {
        try inner.write(real(ino), handle: handle, offset: offset, data: data)
    }

    public func flush(_ ino: InodeNumber, handle: HandleID) throws(Errno) { try inner.flush(real(ino), handle: handle) }
    public func fsync(_ ino: InodeNumber, handle: HandleID?) throws(Errno) { try inner.fsync(real(ino), handle: handle) }
    public func release(_ ino: InodeNumber, handle: HandleID) { inner.release(real(ino), handle: handle) }
    public func servedByKernel(_ ino: InodeNumber, handle: HandleID) { inner.servedByKernel(real(ino), handle: handle) }

    public func create(parent: InodeNumber, name: String, flags: OpenFlags) throws(Errno) -> (EntryReply, OpenReply) {
        let (entry, opened) = try inner.create(parent: real(parent), name: name, flags: flags)
        let reply = aliased(entry, name: name)
        var open = opened
        if reply.attributes.ino != entry.attributes.ino { open.keepCache = false }
        return (reply, open)
    }

    public func mkdir(parent: InodeNumber, name: String) throws(Errno) -> EntryReply {
        try inner.mkdir(parent: real(parent), name: name)
    }

    public func unlink(parent: InodeNumber, name: String) throws(Errno) { try inner.unlink(parent: real(parent), name: name) }
    public func rmdir(parent: InodeNumber, name: String) throws(Errno) { try inner.rmdir(parent: real(parent), name: name) }

    public func rename(parent: InodeNumber, name: String, newParent: InodeNumber, newName: String, flags: RenameFlags) throws(Errno) {
        try inner.rename(parent: real(parent), name: name, newParent: real(newParent), newName: newName, flags: flags)
    }

    public func statfs() throws(Errno) -> FilesystemStats { try inner.statfs() }
    public func getxattr(_ ino: InodeNumber, name: String) throws(Errno) -> [UInt8] { try inner.getxattr(real(ino), name: name) }
    public func listxattr(_ ino: InodeNumber) throws(Errno) -> [String] { try inner.listxattr(real(ino)) }
    public func displayName(of ino: InodeNumber) -> String? { inner.displayName(of: real(ino)) }
}
