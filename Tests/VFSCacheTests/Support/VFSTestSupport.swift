/// Helpers for the VFS tests: a manual clock, a log capture, deterministic test data, and short
/// ways to build a `VFS` over a fake remote, resolve paths and read whole files.
import Foundation
import Synchronization
@testable import VFSCache

/// A clock the test moves by hand, for TTL expiry.
final class ManualClock: Sendable {
    private let seconds = Mutex<Double>(1000)
    var source: TimeSource { TimeSource { [self] in seconds.withLock { $0 } } }
    func advance(_ delta: Double) { seconds.withLock { $0 += delta } }
}

/// Collects log lines.
final class LogCapture: Sendable {
    private final class Lines: Sendable { let list = Mutex<[String]>([]) }
    private let lines = Lines()
    let logger: Logger
    init(level: LogLevel = .debug) {
        let lines = self.lines
        logger = Logger(level: level) { level, message in lines.list.withLock { $0.append("\(level.label): \(message)") } }
    }
    var all: [String] { lines.list.withLock { $0 } }
    func contains(_ text: String) -> Bool { all.contains { $0.contains(text) } }
}

/// Deterministic pseudo-random bytes (xorshift), so block boundaries hold distinct data.
func testBytes(_ count: Int, seed: UInt64 = 42) -> [UInt8] {
    var state = seed | 1
    return (0..<count).map { _ in
        state ^= state << 13; state ^= state >> 7; state ^= state << 17
        return UInt8(truncatingIfNeeded: state)
    }
}

/// The test defaults: small blocks so multi-block files stay small.
func testConfig(_ configure: (inout VFSConfig) -> Void = { _ in }) -> VFSConfig {
    var config = VFSConfig(uid: 1000, gid: 1000)
    config.blockSize = 64 << 10
    config.memoryCacheBytes = 4 << 20
    config.readAheadMaxBytes = 512 << 10
    config.readAheadParallelism = 4
    config.prefetchThreshold = 0
    config.readTimeout = 10
    config.mountTime = Date(timeIntervalSince1970: 1_600_000_000)
    // The tests count calls on the assumption that the first access lists the whole tree
    // before it answers; the racing first access has tests of its own.
    config.eagerListingsWhilePrefetching = 0
    configure(&config)
    return config
}

func makeVFS(_ remote: any RemoteStore, clock: ManualClock = ManualClock(), log: LogCapture = LogCapture(),
             _ configure: (inout VFSConfig) -> Void = { _ in }) throws -> VFS {
    try VFS(remote: remote, config: testConfig(configure), logger: log.logger, clock: clock.source)
}

/// A fresh, empty directory under /tmp, removed by the caller.
func temporaryDirectory() throws -> URL {
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("vfsread-test-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: url, withIntermediateDirectories: true)
    return url
}

extension VFS {
    /// Looks up each component of "/a/b/c" (adding one lookup reference to each).
    func resolve(_ path: String) throws(Errno) -> InodeNumber {
        var ino = rootInode
        for component in path.split(separator: "/") { ino = try lookup(parent: ino, name: String(component)).attributes.ino }
        return ino
    }

    /// Every entry of a folder through opendir/readdir in pages of `page`.
    func list(_ ino: InodeNumber, page: Int = 500) throws(Errno) -> [DirectoryEntry] {
        let handle = try openDirectory(ino)
        defer { releaseDirectory(ino, handle: handle) }
        var all: [DirectoryEntry] = []
        var offset = 0
        while true {
            let entries = try readDirectory(ino, handle: handle, offset: offset, limit: page)
            guard let last = entries.last else { return all }
            all += entries
            offset = last.nextOffset
        }
    }

    /// The whole file, read sequentially in `chunk`-byte requests through one handle.
    func readAll(_ ino: InodeNumber, chunk: Int = 128 << 10) throws(Errno) -> [UInt8] {
        let reply = try open(ino, flags: .read)
        defer { release(ino, handle: reply.handle) }
        var result: [UInt8] = []
        while true {
            let bytes = try read(ino, handle: reply.handle, offset: UInt64(result.count), size: chunk)
            if bytes.isEmpty { return result }
            result += bytes
        }
    }
}

extension DiskBlockCache {
    /// Array conveniences for tests (the cache itself works on raw buffers).
    @discardableResult func write(_ key: BlockKey, _ bytes: [UInt8]) -> Bool { bytes.withUnsafeBytes { write(key, $0) } }
    func readArray(_ key: BlockKey, length: Int) -> [UInt8]? {
        guard let buffer = read(key, length: length) else { return nil }
        defer { CachedBlock.releaseStorage(buffer) }
        return Array(buffer)
    }
}

/// Writes the file's dirty pages out and asks the kernel to drop its cached pages.
func dropFromPageCache(_ path: String) throws {
    let fd = open(path, O_RDONLY)
    guard fd >= 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
    defer { close(fd) }
    fdatasync(fd)
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)
}

/// How many of the file's pages are in the page cache (mincore over a mapping of it).
func residentPages(_ path: String) throws -> Int {
    let fd = open(path, O_RDONLY)
    guard fd >= 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
    defer { close(fd) }
    var status = stat()
    fstat(fd, &status)
    let length = Int(status.st_size)
    guard length > 0, let mapped = mmap(nil, length, PROT_READ, MAP_SHARED, fd, 0), mapped != MAP_FAILED else { return 0 }
    defer { munmap(mapped, length) }
    let page = Int(sysconf(Int32(_SC_PAGESIZE)))
    var vector = [UInt8](repeating: 0, count: (length + page - 1) / page)
    guard mincore(mapped, length, &vector) == 0 else { throw POSIXError(.init(rawValue: errno) ?? .EIO) }
    return vector.filter { $0 & 1 != 0 }.count
}
