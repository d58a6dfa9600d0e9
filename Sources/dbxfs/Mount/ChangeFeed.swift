/// The mount's change feed: the persisted metadata tree (`MetadataStore` in the cache
/// directory) loaded into the VFS before the mount serves, with the namespace operations still
/// queued in the journal on top of it, and the `ChangeWatcher` that keeps it current, started
/// once the FUSE session (and so the kernel notifier) exists.
import Foundation
import VFSCache

final class ChangeFeed: Sendable {
    let watcher: ChangeWatcher
    let store: MetadataStore?
    /// Entries of the saved tree loaded at start (nil: none was saved).
    let loadedEntries: Int?
    /// Holds invalidations' target: the kernel notifier, known only once the session exists.
    private let forwarding: ForwardingInvalidationSink

    private init(watcher: ChangeWatcher, store: MetadataStore?, loadedEntries: Int?, forwarding: ForwardingInvalidationSink) {
        self.watcher = watcher; self.store = store; self.loadedEntries = loadedEntries; self.forwarding = forwarding
    }

    static func prepare(vfs: VFS, remote: any RemoteStore, offline: OfflineState, cacheDirectory: URL,
                        logger: Logger) throws -> ChangeFeed {
        var store: MetadataStore?
        do {
            store = try MetadataStore(directory: cacheDirectory)
        } catch {
            logger.warning("cannot open the metadata store in \(cacheDirectory.path): \(error); remounts will list again")
        }
        let sink = ForwardingInvalidationSink()
        let watcher = ChangeWatcher(vfs: vfs, remote: remote, sink: sink, store: store, offline: offline,
                                    options: ChangeWatcher.Options(longpollTimeout: 30, retryDelay: 1, maxRetryDelay: 2))
        let loaded = watcher.loadPersistedTree()
        // Namespace operations not on Dropbox yet show on top of the saved tree, and the changes
        // since the last mount (below) skip their paths: Dropbox plus what is still pending.
        vfs.showQueuedNamespaceOperations()
        if let loaded {
            logger.info("loaded \(loaded) entries of saved metadata")
            // A remount shows Dropbox as it is now: the changes since the last mount first.
            if !offline.isOffline { watcher.catchUp() }
        }
        return ChangeFeed(watcher: watcher, store: store, loadedEntries: loaded, forwarding: sink)
    }

    func start(sink: any CacheInvalidationSink) {
        forwarding.connect(sink)
        watcher.start()
    }

    func stop() {
        watcher.stop()
        store?.close()
    }
}
