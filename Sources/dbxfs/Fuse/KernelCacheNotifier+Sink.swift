/// The change watcher's invalidations, delivered to the kernel. The watcher calls this on its
/// own thread, which is what the notify_inval_* deadlock rule needs (never from a FUSE request).
///
/// `ForwardingInvalidationSink` exists because the watcher is built with the backend, before the
/// FUSE session (and its notifier) exist; it drops invalidations until a target is set.
import Foundation
import Synchronization
import VFSCache

extension KernelCacheNotifier: CacheInvalidationSink {
    func invalidate(_ items: [KernelInvalidation]) {
        for item in items {
            // -ENOENT (nothing cached) and -ENOTCONN (unmounting) are expected; nothing to do.
            switch item {
            case .inode(let ino): invalidateInode(ino)
            case .entry(let parent, let name): invalidateEntry(parent: parent, name: name)
            case .deleted(let parent, let child, let name): deleted(parent: parent, child: child, name: name)
            }
        }
    }
}

final class ForwardingInvalidationSink: CacheInvalidationSink {
    private let target = Mutex<(any CacheInvalidationSink)?>(nil)
    func connect(_ sink: any CacheInvalidationSink) { target.withLock { $0 = sink } }
    func invalidate(_ items: [KernelInvalidation]) {
        guard let sink = target.withLock({ $0 }) else { return }
        sink.invalidate(items)
    }
}
