/// `DiskBlockCache`: blocks kept in files under the cache directory, with their own byte budget,
/// surviving remounts. Layout: `<cache>/blocks/<blockSize>/<hex file id>/<hex rev>-<index>`, so
/// a different block size or a new rev never matches old files. Each block is written to a
/// temporary name and renamed into place, so a crash leaves whole blocks or none; leftovers are
/// removed by the startup scan, which also rebuilds the LRU order from file modification times.
///
/// The index lives in memory under `lock`; file I/O happens outside it. A block whose file has
/// vanished or has the wrong length is treated as a miss and forgotten.
import Foundation
#if canImport(Glibc)
import Glibc
#endif

final class DiskBlockCache: @unchecked Sendable {
    // @unchecked: `index` is only touched with `lock` held.
    private let lock = NSLock()
    private var index = LRUIndex<BlockKey>()
    let root: URL
    let budget: Int64
    private let log: Logger

    init(directory: URL, blockSize: Int, budget: Int64, log: Logger) throws {
        root = directory.appendingPathComponent("blocks").appendingPathComponent(String(blockSize))
        self.budget = budget
        self.log = log
        try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
        scan()
    }

    // MARK: Naming

    private static func hex(_ text: String) -> String {
        text.utf8.map { String(format: "%02x", $0) }.joined()
    }

    private static func unhex(_ text: Substring) -> String? {
        guard text.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        var index = text.startIndex
        while index < text.endIndex {
            let next = text.index(index, offsetBy: 2)
            guard let byte = UInt8(text[index..<next], radix: 16) else { return nil }
            bytes.append(byte)
            index = next
        }
        return String(bytes: bytes, encoding: .utf8)
    }

    private func url(for key: BlockKey) -> URL {
        root.appendingPathComponent(Self.hex(key.fileID))
            .appendingPathComponent("\(Self.hex(key.rev))-\(key.index)")
    }

    private func folder(forFileID fileID: String) -> URL { root.appendingPathComponent(Self.hex(fileID)) }

    /// Rebuilds the index from the files present, oldest first, and trims to the budget.
    private func scan() {
        let fm = FileManager.default
        var found: [(key: BlockKey, size: Int, date: Date)] = []
        let folders = (try? fm.contentsOfDirectory(at: root, includingPropertiesForKeys: nil)) ?? []
        for folder in folders {
            guard let fileID = Self.unhex(Substring(folder.lastPathComponent)) else { continue }
            let files = (try? fm.contentsOfDirectory(at: folder, includingPropertiesForKeys: [.fileSizeKey, .contentModificationDateKey])) ?? []
            for file in files {
                let name = file.lastPathComponent
                let parts = name.split(separator: "-")
                guard parts.count == 2, let rev = Self.unhex(parts[0]), let blockIndex = UInt64(parts[1]),
                      let values = try? file.resourceValues(forKeys: [.fileSizeKey, .contentModificationDateKey]),
                      let size = values.fileSize else {
                    try? fm.removeItem(at: file)   // a temporary left by a crash, or a stranger
                    continue
                }
                found.append((BlockKey(fileID: fileID, rev: rev, index: blockIndex), size, values.contentModificationDate ?? .distantPast))
            }
        }
        found.sort { $0.date < $1.date }
        lock.lock()
        for item in found { index.insert(item.key, size: item.size) }
        let victims = evictLocked()
        lock.unlock()
        remove(victims)
        if !found.isEmpty { log.debug("disk cache: \(found.count) blocks found in \(root.path)") }
    }

    // MARK: Operations

    /// The block's bytes if cached with exactly `length` bytes, in a buffer the caller then owns
    /// (from `CachedBlock.allocateStorage`).
    func read(_ key: BlockKey, length: Int) -> UnsafeMutableRawBufferPointer? {
        lock.lock()
        let known = index.touch(key)
        lock.unlock()
        guard known else { return nil }
        let path = url(for: key).path
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { forget(key); return nil }
        defer { close(fd) }
        let buffer = CachedBlock.allocateStorage(byteCount: length)
        var done = 0
        while done < length {
            let got = Glibc.read(fd, buffer.baseAddress! + done, length - done)
            if got < 0 && errno == EINTR { continue }
            guard got > 0 else { break }
            done += got
        }
        // One more byte available means the file is longer than expected: not this block.
        var extra: UInt8 = 0
        guard done == length && Glibc.read(fd, &extra, 1) == 0 else {
            CachedBlock.releaseStorage(buffer)
            log.warning("disk cache: dropping \(path): unexpected length")
            forget(key)
            try? FileManager.default.removeItem(atPath: path)
            return nil
        }
        return buffer
    }

    func contains(_ key: BlockKey) -> Bool {
        lock.lock(); defer { lock.unlock() }
        return index.contains(key)
    }

    /// Stores the block (atomically), then evicts the oldest blocks over the budget.
    func write(_ key: BlockKey, _ bytes: UnsafeRawBufferPointer) {
        guard Int64(bytes.count) <= budget else { return }
        let target = url(for: key)
        let temporary = target.deletingLastPathComponent().appendingPathComponent(".tmp-\(UUID().uuidString)")
        do {
            try FileManager.default.createDirectory(at: target.deletingLastPathComponent(), withIntermediateDirectories: true)
            let ok = { (raw: UnsafeRawBufferPointer) -> Bool in
                let fd = open(temporary.path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0o600)
                guard fd >= 0 else { return false }
                defer { close(fd) }
                var done = 0
                while done < raw.count {
                    let wrote = Glibc.write(fd, raw.baseAddress! + done, raw.count - done)
                    if wrote < 0 && errno == EINTR { continue }
                    guard wrote > 0 else { return false }
                    done += wrote
                }
                return true
            }(bytes)
            guard ok, rename(temporary.path, target.path) == 0 else {
                let reason = String(cString: strerror(errno))
                try? FileManager.default.removeItem(at: temporary)
                log.warning("disk cache: cannot write \(target.path): \(reason)")
                return
            }
        } catch {
            log.warning("disk cache: cannot write \(target.path): \(error)")
            return
        }
        lock.lock()
        index.insert(key, size: bytes.count)
        let victims = evictLocked()
        lock.unlock()
        remove(victims)
    }

    /// Drops every block of one revision of a file.
    func purge(fileID: String, rev: String) {
        let folder = folder(forFileID: fileID)
        let prefix = Self.hex(rev) + "-"
        let names = (try? FileManager.default.contentsOfDirectory(atPath: folder.path)) ?? []
        var victims: [BlockKey] = []
        for name in names where name.hasPrefix(prefix) {
            if let blockIndex = UInt64(name.dropFirst(prefix.count)) {
                victims.append(BlockKey(fileID: fileID, rev: rev, index: blockIndex))
            }
        }
        lock.lock()
        for key in victims { index.remove(key) }
        lock.unlock()
        remove(victims)
    }

    var usage: (bytes: Int64, blocks: Int) {
        lock.lock(); defer { lock.unlock() }
        return (Int64(index.totalSize), index.count)
    }

    private func forget(_ key: BlockKey) {
        lock.lock(); index.remove(key); lock.unlock()
    }

    private func evictLocked() -> [BlockKey] {
        var victims: [BlockKey] = []
        while Int64(index.totalSize) > budget, let victim = index.popOldest() { victims.append(victim.key) }
        return victims
    }

    private func remove(_ keys: [BlockKey]) {
        for key in keys { unlink(url(for: key).path) }
    }
}
