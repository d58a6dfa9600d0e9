/// Drops entries from the kernel's caches when Dropbox changes under the mount (issue 7's change
/// watcher): attributes and pages of an inode, a name in a folder, or a deleted child.
///
/// Rules (libfuse's notify_inval_* documentation):
/// - call from any thread *except* from inside a FUSE callback working on the same inode or
///   folder: the kernel may wait for that very request, and the mount deadlocks;
/// - a return of -ENOENT only means the kernel had nothing cached; it is not an error.
/// Every method returns 0 or a negative errno, and -ENOTCONN once the session is gone.
import CFuse
import Foundation
import VFSCache

final class KernelCacheNotifier: @unchecked Sendable {
    // Safe: `session` is only read and written under `lock`, and `detach()` (called before
    // fuse_session_destroy) waits for any notification in flight, so none outlives the session.
    private let lock = NSLock()
    private var session: OpaquePointer?

    func attach(_ session: OpaquePointer) { lock.withLock { self.session = session } }
    func detach() { lock.withLock { session = nil } }

    private func withSession(_ body: (OpaquePointer) -> Int32) -> Int32 {
        lock.withLock { session.map(body) ?? -ENOTCONN }
    }

    /// The kernel forgets `ino`'s cached attributes and all its cached pages.
    @discardableResult
    func invalidateInode(_ ino: InodeNumber) -> Int32 {
        withSession { fuse_lowlevel_notify_inval_inode($0, ino, 0, 0) }
    }

    /// The kernel forgets the name → inode mapping of `name` in `parent` (and its negative entry).
    @discardableResult
    func invalidateEntry(parent: InodeNumber, name: String) -> Int32 {
        withSession { session in
            name.withCString { fuse_lowlevel_notify_inval_entry(session, parent, $0, strlen($0)) }
        }
    }

    /// `child`, named `name` in `parent`, was deleted: the kernel drops the entry and, if the
    /// inode matches, unhashes it so open descriptors see it as deleted.
    @discardableResult
    func deleted(parent: InodeNumber, child: InodeNumber, name: String) -> Int32 {
        withSession { session in
            name.withCString { fuse_lowlevel_notify_delete(session, parent, child, $0, strlen($0)) }
        }
    }
}
