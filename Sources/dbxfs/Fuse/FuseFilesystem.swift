/// The object every FUSE callback works on: the facade plus the few mount-wide settings the glue
/// itself needs. libfuse hands it back to each callback as `fuse_req_userdata(req)`; it is passed
/// in unretained, and `FuseSession` keeps it alive for the whole life of the session.
import CFuse
import Foundation
import VFSCache

final class FuseFilesystem: Sendable {
    let operations: any FilesystemOperations
    /// Largest read/write request we ask the kernel for (bytes). 1 MiB = 256 pages, which is
    /// /proc/sys/fs/fuse/max_pages_limit's default; libfuse 3.14 requests FUSE_MAX_PAGES itself
    /// when `conn->max_write` exceeds 32 pages.
    let maxRequestSize: UInt32
    /// Kernel background-request limit (read-ahead runs in the background): high enough that the
    /// facade sees several read-ahead requests at once and can fetch blocks in parallel.
    let maxBackground: UInt32
    /// Reported as st_blksize: tools such as cp and cat size their buffers from it.
    let preferredIOSize: Int
    /// Offer readdirplus to the kernel (hidden `--no-readdirplus` turns it off, for measuring).
    let readDirectoryPlus: Bool
    /// Read-ahead to answer in INIT (bytes). The kernel keeps the smaller of this and the mount's
    /// current window, which `KernelReadAhead` raises before the loop processes INIT.
    let maxReadAhead: UInt32
    /// Opens served by the kernel from a backing file (FUSE passthrough), and the per-inode
    /// rules that go with them.
    let passthrough: PassthroughOpens
    /// Counts opens by who serves them (nil: the mount keeps no metrics). The operations
    /// themselves are timed by `TimedFilesystem`, in front of `operations`.
    let metrics: MountMetrics?
    let log: Logger

    init(operations: any FilesystemOperations, maxRequestSize: UInt32 = 1 << 20,
         maxBackground: UInt32 = 64, readDirectoryPlus: Bool = true, maxReadAhead: UInt32 = 1 << 20,
         metrics: MountMetrics? = nil, log: Logger) {
        self.operations = metrics.map { TimedFilesystem(operations, metrics: $0) } ?? operations
        self.metrics = metrics
        self.maxRequestSize = maxRequestSize
        self.maxBackground = maxBackground
        self.readDirectoryPlus = readDirectoryPlus
        self.maxReadAhead = maxReadAhead
        self.preferredIOSize = Int(maxRequestSize)
        self.passthrough = PassthroughOpens(log: log)
        self.log = log
    }

    /// Recovers the filesystem inside a callback. The pointer was created with `passUnretained`
    /// in `FuseSession` and outlives every request.
    static func from(_ req: fuse_req_t?) -> FuseFilesystem {
        Unmanaged<FuseFilesystem>.fromOpaque(fuse_req_userdata(req)!).takeUnretainedValue()
    }

    static func from(userdata: UnsafeMutableRawPointer?) -> FuseFilesystem {
        Unmanaged<FuseFilesystem>.fromOpaque(userdata!).takeUnretainedValue()
    }

    // MARK: - Conversions shared by the operation files

    func stat(of attributes: FileAttributes) -> stat {
        var st = Glibc.stat()
        st.st_ino = UInt(attributes.ino)
        let type: mode_t = attributes.kind == .directory ? DBXFS_S_IFDIR : DBXFS_S_IFREG
        st.st_mode = type | mode_t(attributes.permissions & 0o7777)
        st.st_nlink = UInt(attributes.nlink)
        st.st_uid = attributes.uid
        st.st_gid = attributes.gid
        st.st_size = Int(clamping: attributes.size)
        st.st_blocks = Int((attributes.size + 511) / 512)
        st.st_blksize = preferredIOSize
        let time = timespec(attributes.mtime)
        st.st_mtim = time
        st.st_ctim = time
        st.st_atim = time
        return st
    }

    func entryParam(_ reply: EntryReply) -> fuse_entry_param {
        var e = fuse_entry_param()
        e.ino = reply.attributes.ino
        e.generation = 1
        e.attr = stat(of: reply.attributes)
        e.attr_timeout = reply.attributeTimeout
        e.entry_timeout = reply.entryTimeout
        return e
    }
}

extension timespec {
    init(_ date: Date) {
        let t = date.timeIntervalSince1970
        let seconds = t.rounded(.down)
        self.init(tv_sec: Int(seconds), tv_nsec: Int(((t - seconds) * 1e9).rounded(.down)))
    }

    var date: Date { Date(timeIntervalSince1970: Double(tv_sec) + Double(tv_nsec) / 1e9) }
}

/// Replies `-errno` for a thrown facade error; every callback ends its failure path here.
@inline(__always)
func reply(_ req: fuse_req_t?, error: Errno) {
    fuse_reply_err(req, error.rawValue)
}

/// Turns a C string argument from libfuse into a Swift String. Names Dropbox cannot hold
/// (invalid UTF-8) are refused here with EILSEQ rather than silently repaired.
func decodeName(_ name: UnsafePointer<CChar>?) -> String? {
    guard let name else { return nil }
    return String(validatingCString: name)
}
