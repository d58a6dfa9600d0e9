/// FUSE connection-level operations: init (capabilities and request sizes), destroy, statfs.
///
/// Throughput choices made in init (measured in docs/BENCHMARKS.md):
/// - max_write (and with it FUSE_MAX_PAGES, which libfuse 3.14 requests on its own when
///   max_write exceeds 32 pages) = 1 MiB, so reads and writes arrive in 1 MiB requests instead of
///   128 KiB ones;
/// - ASYNC_READ so the kernel's read-ahead requests reach us concurrently, and a higher
///   max_background so more of them are in flight at once;
/// - PARALLEL_DIROPS so lookups and readdirs in one folder don't serialise on the network;
/// - the writeback cache stays off (its caveats: O_APPEND, reads on O_WRONLY, size ownership).
import CFuse
import Foundation
import VFSCache

enum SessionOperations {
    static func install(into ops: inout fuse_lowlevel_ops) {
        ops.`init` = { userdata, conn in
            guard let conn else { return }
            let fs = FuseFilesystem.from(userdata: userdata)
            _ = dbxfs_conn_want(conn, DBXFS_CAP_ASYNC_READ)
            _ = dbxfs_conn_want(conn, DBXFS_CAP_PARALLEL_DIROPS)
            _ = dbxfs_conn_want(conn, DBXFS_CAP_ATOMIC_O_TRUNC)
            // readdirplus only when the kernel thinks it pays (ls -l, find), plain readdir otherwise.
            if fs.readDirectoryPlus {
                _ = dbxfs_conn_want(conn, DBXFS_CAP_READDIRPLUS)
                _ = dbxfs_conn_want(conn, DBXFS_CAP_READDIRPLUS_AUTO)
            } else {
                dbxfs_conn_unwant(conn, DBXFS_CAP_READDIRPLUS)
                dbxfs_conn_unwant(conn, DBXFS_CAP_READDIRPLUS_AUTO)
            }
            // Drop cached pages when a file's size or mtime changes under us (remote edits).
            _ = dbxfs_conn_want(conn, DBXFS_CAP_AUTO_INVAL_DATA)
            dbxfs_conn_unwant(conn, DBXFS_CAP_WRITEBACK_CACHE)
            // Locks are local to this machine; let the kernel handle them.
            dbxfs_conn_unwant(conn, DBXFS_CAP_POSIX_LOCKS)
            dbxfs_conn_unwant(conn, DBXFS_CAP_FLOCK_LOCKS)
            conn.pointee.max_write = fs.maxRequestSize
            // 0 = no limit of our own: the kernel then sends up to max_pages per read.
            conn.pointee.max_read = 0
            // The kernel offered its default window (128 KiB); answering more only counts if the
            // mount's window was raised before INIT (KernelReadAhead), since it keeps the minimum.
            conn.pointee.max_readahead = max(conn.pointee.max_readahead, fs.maxReadAhead)
            conn.pointee.max_background = fs.maxBackground
            conn.pointee.congestion_threshold = fs.maxBackground * 3 / 4
            fs.log.debug("fuse init: proto \(conn.pointee.proto_major).\(conn.pointee.proto_minor), "
                + "want 0x\(String(conn.pointee.want, radix: 16)), max_write \(conn.pointee.max_write), "
                + "max_readahead \(conn.pointee.max_readahead)")
        }
        ops.statfs = { req, _ in
            let fs = FuseFilesystem.from(req)
            do throws(Errno) {
                let stats = try fs.operations.statfs()
                var st = statvfs()
                st.f_bsize = UInt(stats.blockSize)
                st.f_frsize = UInt(stats.blockSize)
                st.f_blocks = UInt(stats.totalBlocks)
                st.f_bfree = UInt(stats.freeBlocks)
                st.f_bavail = UInt(stats.freeBlocks)
                // Dropbox has no inode limit: a large round total, and as used only the entries
                // the mount knows, so `df -i` shows 0-1% and tools that check free inodes go on.
                st.f_files = 1 << 32
                st.f_ffree = UInt(1 << 32) - UInt(min(stats.usedFiles, (1 << 32) - 1))
                st.f_favail = st.f_ffree
                st.f_namemax = UInt(stats.maxNameLength)
                fuse_reply_statfs(req, &st)
            } catch {
                reply(req, error: error)
            }
        }
    }
}

/// The whole operations table. `nonisolated` on purpose: callbacks built in a main-actor context
/// would be inferred @MainActor and trap on libfuse's worker threads (see design notes).
nonisolated func makeOperationTable() -> fuse_lowlevel_ops {
    var ops = fuse_lowlevel_ops()
    SessionOperations.install(into: &ops)
    EntryOperations.install(into: &ops)
    DirectoryOperations.install(into: &ops)
    FileOperations.install(into: &ops)
    NamespaceOperations.install(into: &ops)
    XattrOperations.install(into: &ops)
    return ops
}
