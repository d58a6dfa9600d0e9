/// `SpaceUsageCache`: statfs answers from users/get_space_usage, reused for `statfsTTL` so that
/// `df` (and desktop environments polling it) cost at most one call a minute. When the call
/// fails, the last answer is served; with none, statfs fails with EIO.
import Foundation

final class SpaceUsageCache: @unchecked Sendable {
    // @unchecked: `cached` is only touched with `lock` held.
    private let lock = NSLock()
    private var cached: (stats: FilesystemStats, at: Double)?
    private let remote: any RemoteStore
    private let ttl: Double
    private let clock: TimeSource
    private let log: Logger

    static let blockSize: UInt64 = 4096

    init(remote: any RemoteStore, ttl: Double, clock: TimeSource, log: Logger) {
        self.remote = remote
        self.ttl = ttl
        self.clock = clock
        self.log = log
    }

    func stats() throws(Errno) -> FilesystemStats {
        let now = clock.now()
        lock.lock()
        let previous = cached
        lock.unlock()
        if let previous, now - previous.at < ttl { return previous.stats }
        do throws(RemoteError) {
            let usage = try remote.spaceUsage()
            let total = usage.allocated / Self.blockSize
            let used = min(usage.used, usage.allocated) / Self.blockSize
            let stats = FilesystemStats(blockSize: Self.blockSize, totalBlocks: total, freeBlocks: total - used, maxNameLength: 255)
            lock.lock(); cached = (stats, now); lock.unlock()
            return stats
        } catch {
            if let previous {
                log.warning("space usage unavailable (\(error)); reporting the last known figures")
                return previous.stats
            }
            log.error("space usage unavailable: \(error)")
            throw .io
        }
    }
}
