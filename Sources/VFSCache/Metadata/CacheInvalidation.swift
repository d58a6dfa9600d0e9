/// What the change watcher tells the kernel to forget after a remote change, and the sink it
/// tells it through. The FUSE layer's `KernelCacheNotifier` is the production sink; tests record.
///
/// Only what the kernel can have cached is named: inodes it holds a lookup reference to, and names
/// in folders (a new name may sit in the kernel as a negative entry). Entry and attribute timeouts
/// are short anyway; these notifications matter for page caches kept across opens and for the
/// window before those timeouts pass.
import Foundation

public enum KernelInvalidation: Sendable, Hashable {
    /// The inode's attributes and cached pages are stale.
    case inode(InodeNumber)
    /// The name in `parent` now means something else (or something new).
    case entry(parent: InodeNumber, name: String)
    /// `child`, named `name` in `parent`, is gone.
    case deleted(parent: InodeNumber, child: InodeNumber, name: String)
}

/// Receives invalidations on the watcher's own thread, never inside a FUSE request (the
/// notify_inval_* deadlock rule).
public protocol CacheInvalidationSink: Sendable {
    func invalidate(_ items: [KernelInvalidation])
}

/// For mounts without a kernel to tell (tests, benchmarks).
public struct NoInvalidationSink: CacheInvalidationSink {
    public init() {}
    public func invalidate(_ items: [KernelInvalidation]) {}
}
