/// The filesystem facade: the inode-level operations the FUSE glue calls, one method per FUSE
/// operation, synchronous and thread-safe. Every method throws `Errno` and nothing else, so the
/// glue only has to reply `-errno`.
///
/// Calls arrive on FUSE worker threads (plain pthreads) and may block on the network.
///
/// Lookup counts follow the FUSE low-level protocol: every successful `lookup`, `create`, `mkdir`
/// and every entry returned by `readDirectoryPlus` adds one to the inode's count; `forget`
/// subtracts. An inode number is never reused while its count is above zero.
import Foundation

public typealias InodeNumber = UInt64
public typealias HandleID = UInt64

public struct FileAttributes: Sendable, Equatable {
    public enum Kind: Sendable, Equatable { case file, directory }
    public var ino: InodeNumber
    public var kind: Kind
    public var size: UInt64
    /// Modification time (client_modified for files; folders have none on Dropbox: mount time).
    public var mtime: Date
    /// Permission bits only (0o644 / 0o755 after the umask).
    public var permissions: UInt16
    public var nlink: UInt32
    public var uid: UInt32
    public var gid: UInt32

    public init(ino: InodeNumber, kind: Kind, size: UInt64, mtime: Date, permissions: UInt16,
                nlink: UInt32, uid: UInt32, gid: UInt32) {
        self.ino = ino; self.kind = kind; self.size = size; self.mtime = mtime
        self.permissions = permissions; self.nlink = nlink; self.uid = uid; self.gid = gid
    }
}

/// What `lookup`, `create` and `mkdir` return: the attributes plus how long the kernel may cache them.
public struct EntryReply: Sendable, Equatable {
    public var attributes: FileAttributes
    /// Seconds the kernel may cache the name → inode mapping (0 for negative replies means none).
    public var entryTimeout: Double
    public var attributeTimeout: Double
    public init(attributes: FileAttributes, entryTimeout: Double, attributeTimeout: Double) {
        self.attributes = attributes; self.entryTimeout = entryTimeout; self.attributeTimeout = attributeTimeout
    }
}

public struct DirectoryEntry: Sendable, Equatable {
    public var name: String
    public var attributes: FileAttributes
    /// Cookie to pass back as `offset` to continue after this entry.
    public var nextOffset: Int
    public init(name: String, attributes: FileAttributes, nextOffset: Int) {
        self.name = name; self.attributes = attributes; self.nextOffset = nextOffset
    }
}

public struct OpenReply: Sendable, Equatable {
    public var handle: HandleID
    /// Keep the kernel page cache from an earlier open: true when the rev is unchanged since.
    public var keepCache: Bool
    /// Ask the kernel to bypass the page cache for this open (unused today).
    public var directIO: Bool
    /// A local file holding exactly this open's bytes (a whole, verified copy of the revision), for
    /// the glue to hand to the kernel with FUSE passthrough; nil: serve reads as usual.
    public var backingFile: String?
    /// `backingFile` is the staging file this open writes (FUSE passthrough for writes): the open
    /// may be served by the kernel only from exactly that file, never from another one.
    public var backingTakesWrites: Bool
    /// Serve from `backingFile` only if the kernel already serves other opens of the inode from it;
    /// never start that (a reader of local bytes; a writer while the staging budget is spent).
    public var backingJoinOnly: Bool
    public init(handle: HandleID, keepCache: Bool, directIO: Bool = false, backingFile: String? = nil,
                backingTakesWrites: Bool = false, backingJoinOnly: Bool = false) {
        self.handle = handle; self.keepCache = keepCache; self.directIO = directIO; self.backingFile = backingFile
        self.backingTakesWrites = backingTakesWrites; self.backingJoinOnly = backingJoinOnly
    }
}

public struct FilesystemStats: Sendable, Equatable {
    public var blockSize: UInt64
    public var totalBlocks: UInt64
    public var freeBlocks: UInt64
    public var maxNameLength: UInt64
    /// Files and folders the filesystem knows of (the "used inodes" of `df -i`; Dropbox itself
    /// has no inode limit).
    public var usedFiles: UInt64
    public init(blockSize: UInt64, totalBlocks: UInt64, freeBlocks: UInt64, maxNameLength: UInt64, usedFiles: UInt64 = 0) {
        self.blockSize = blockSize; self.totalBlocks = totalBlocks; self.freeBlocks = freeBlocks
        self.maxNameLength = maxNameLength; self.usedFiles = usedFiles
    }
}

/// Which attributes `setattr` changes; nil leaves one as it is.
public struct AttributeChanges: Sendable, Equatable {
    public var size: UInt64?
    public var mtime: Date?
    /// chmod/chown requests: accepted and ignored (Dropbox stores no modes), see docs/SEMANTICS.md.
    public var mode: UInt32?
    public var uid: UInt32?
    public var gid: UInt32?
    public init(size: UInt64? = nil, mtime: Date? = nil, mode: UInt32? = nil, uid: UInt32? = nil, gid: UInt32? = nil) {
        self.size = size; self.mtime = mtime; self.mode = mode; self.uid = uid; self.gid = gid
    }
}

public struct OpenFlags: OptionSet, Sendable {
    public let rawValue: Int32
    public init(rawValue: Int32) { self.rawValue = rawValue }
    public static let read = OpenFlags(rawValue: 1 << 0)
    public static let write = OpenFlags(rawValue: 1 << 1)
    public static let truncate = OpenFlags(rawValue: 1 << 2)
    public static let append = OpenFlags(rawValue: 1 << 3)
    public static let exclusive = OpenFlags(rawValue: 1 << 4)
}

public struct RenameFlags: OptionSet, Sendable {
    public let rawValue: UInt32
    public init(rawValue: UInt32) { self.rawValue = rawValue }
    public static let noReplace = RenameFlags(rawValue: 1 << 0)
    public static let exchange = RenameFlags(rawValue: 1 << 1)
}

/// The root directory's inode number, as FUSE requires.
public let rootInode: InodeNumber = 1

/// The operations, as a protocol so the FUSE glue can be exercised against a stand-in.
/// `VFS` (in this module) is the real implementation.
public protocol FilesystemOperations: AnyObject, Sendable {
    func lookup(parent: InodeNumber, name: String) throws(Errno) -> EntryReply
    func forget(_ ino: InodeNumber, count: UInt64)
    func getattr(_ ino: InodeNumber) throws(Errno) -> (FileAttributes, timeout: Double)
    func setattr(_ ino: InodeNumber, changes: AttributeChanges, handle: HandleID?) throws(Errno) -> FileAttributes

    func openDirectory(_ ino: InodeNumber) throws(Errno) -> HandleID
    /// Entries after `offset` (0 = from the start; "." and ".." included), at most `limit`.
    func readDirectory(_ ino: InodeNumber, handle: HandleID, offset: Int, limit: Int) throws(Errno) -> [DirectoryEntry]
    func releaseDirectory(_ ino: InodeNumber, handle: HandleID)

    func open(_ ino: InodeNumber, flags: OpenFlags) throws(Errno) -> OpenReply
    func read(_ ino: InodeNumber, handle: HandleID, offset: UInt64, size: Int) throws(Errno) -> [UInt8]
    /// The same read without the copy into an array: `body` gets the bytes as consecutive pieces
    /// straight from the cache (valid only during the call), e.g. for `fuse_reply_iov`. An empty
    /// list means end of file. Has a default implementation over `read`.
    func readPieces<R>(_ ino: InodeNumber, handle: HandleID, offset: UInt64, size: Int,
                       _ body: ([UnsafeRawBufferPointer]) -> R) throws(Errno) -> R
    func write(_ ino: InodeNumber, handle: HandleID, offset: UInt64, data: UnsafeRawBufferPointer) throws(Errno) -> Int
    /// Called on every close() of a descriptor; may report an earlier write-back error.
    func flush(_ ino: InodeNumber, handle: HandleID) throws(Errno)
    /// Returns once the file is committed to Dropbox, or throws why not.
    func fsync(_ ino: InodeNumber, handle: HandleID?) throws(Errno)
    /// Last close of an open: queues the write-back; never waits for the network.
    func release(_ ino: InodeNumber, handle: HandleID)
    /// The kernel serves the open `handle` by itself from its `backingFile` (FUSE passthrough):
    /// its reads and writes will not come here. Has a default implementation doing nothing.
    func servedByKernel(_ ino: InodeNumber, handle: HandleID)

    func create(parent: InodeNumber, name: String, flags: OpenFlags) throws(Errno) -> (EntryReply, OpenReply)
    func mkdir(parent: InodeNumber, name: String) throws(Errno) -> EntryReply
    func unlink(parent: InodeNumber, name: String) throws(Errno)
    func rmdir(parent: InodeNumber, name: String) throws(Errno)
    func rename(parent: InodeNumber, name: String, newParent: InodeNumber, newName: String, flags: RenameFlags) throws(Errno)

    func statfs() throws(Errno) -> FilesystemStats
    func getxattr(_ ino: InodeNumber, name: String) throws(Errno) -> [UInt8]
    func listxattr(_ ino: InodeNumber) throws(Errno) -> [String]
    /// The name `ino` is listed under, in the case Dropbox shows (nil: unknown, or the root).
    /// Has a default implementation answering nil.
    func displayName(of ino: InodeNumber) -> String?
}

extension FilesystemOperations {
    public func displayName(of ino: InodeNumber) -> String? { nil }
    public func servedByKernel(_ ino: InodeNumber, handle: HandleID) {}

    public func readPieces<R>(_ ino: InodeNumber, handle: HandleID, offset: UInt64, size: Int,
                              _ body: ([UnsafeRawBufferPointer]) -> R) throws(Errno) -> R {
        let bytes = try read(ino, handle: handle, offset: offset, size: size)
        return bytes.withUnsafeBytes { body($0.isEmpty ? [] : [$0]) }
    }
}
