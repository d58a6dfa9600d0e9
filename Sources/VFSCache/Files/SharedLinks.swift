/// The `user.dropbox.shared_link` extended attribute: the URL of the shared link Dropbox has for a
/// file or folder (`dbxfs share` makes one), read by `getfattr -n user.dropbox.shared_link FILE`.
///
/// Unlike the other `user.dropbox.*` attributes it is not in the tree: asking costs a remote call
/// (`RemoteStore.sharedLink`, list_shared_links for that item alone). So it is
/// - not listed by listxattr: `getfattr -d`, `cp -a` and `rsync -X` read every listed attribute of
///   every file, and must not make one call per file (nor copy a link onto another file);
/// - asked at most once per item per `ttl` (60 s), answers without a link included, so a script
///   that reads it for many files costs one call each, once;
/// - updated at once by the mount's own `dbxfs share` (`note`), which knows the link it made.
import Foundation
import Synchronization

final class SharedLinks: Sendable {
    private let remote: any RemoteStore
    private let ttl: Double
    private let clock: TimeSource
    /// By file or folder id: the link (nil: none) and when that was learnt.
    private let known = Mutex<[String: (url: String?, at: Double)]>([:])

    init(remote: any RemoteStore, ttl: Double = 60, clock: TimeSource) {
        self.remote = remote; self.ttl = ttl; self.clock = clock
    }

    /// The link of the item `id` at `path` (relative to the mount root), or nil when it has none.
    func link(id: String, path: String) throws(RemoteError) -> String? {
        let now = clock.now()
        if let cached = known.withLock({ $0[id] }), now - cached.at < ttl { return cached.url }
        let url = try remote.sharedLink(path: path)
        known.withLock { $0[id] = (url, now) }
        return url
    }

    func note(id: String, url: String) {
        let now = clock.now()
        known.withLock { $0[id] = (url, now) }
    }
}

extension VFS {
    /// getxattr `user.dropbox.shared_link`: ENODATA without a link (or for what Dropbox does not
    /// have yet: the mount root, a file not uploaded yet); EIO when Dropbox cannot say.
    func sharedLinkAttribute(of node: Node) throws(Errno) -> [UInt8] {
        guard let id = node.id, node.isAttached, let path = metadata.path(of: node.ino) else { throw .noData }
        let url: String?
        do throws(RemoteError) {
            url = try sharedLinks.link(id: id, path: path)
        } catch .notFound {
            throw .noData
        } catch {
            logger.warning("getxattr \(ExtendedAttributes.sharedLink) of \(path): \(error)")
            throw Errno(error)
        }
        guard let url else { throw .noData }
        return Array(url.utf8)
    }

    /// The mount made (or found) the link `url` for the item at `path`: the attribute shows it
    /// from now on without asking Dropbox.
    public func noteSharedLink(path: String, url: String) {
        guard let ino = metadata.locked({ $0.resolve(path: path) }), let id = metadata.node(ino)?.id else { return }
        sharedLinks.note(id: id, url: url)
    }
}
