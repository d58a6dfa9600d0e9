/// Pins (`dbxfs pin`): the disk cache's eviction rules with pinned files (PinnedBlockIndex), and
/// PinnedFiles against the in-memory fake: a pinned folder is on disk, verified and readable with
/// every download failing; pins that do not fit are refused; pinned blocks survive other reads
/// over the budget, and unpinned ones are evicted first; pins are saved in the metadata store.
import Foundation
import Synchronization
import Testing
@testable import VFSCache

@Suite struct PinnedFilesTests {
    private func key(_ file: String, _ index: UInt64) -> BlockKey { BlockKey(fileID: file, rev: "r1", index: index) }

    @Test func pinnedBlocksAreNeverEvictedAndCountAgainstTheBudget() {
        var index = PinnedBlockIndex(budget: 300)
        #expect(index.setPinned(["id:p"]).isEmpty)
        index.insert(key("id:p", 0), size: 100)
        index.insert(key("id:p", 1), size: 100)
        index.insert(key("id:a", 0), size: 100)
        #expect(index.evict().isEmpty)
        index.insert(key("id:b", 0), size: 100)   // 400 > 300: an unpinned block goes, the oldest
        #expect(index.evict() == [key("id:a", 0)])
        index.insert(key("id:c", 0), size: 100)
        #expect(index.evict() == [key("id:b", 0)])
        #expect(index.pinnedSize == 200 && index.totalSize == 300)
        // Touching never moves a pinned block into the LRU.
        let touched = index.touch(key("id:p", 0))
        #expect(touched)
        index.insert(key("id:d", 0), size: 100)
        #expect(index.evict() == [key("id:c", 0)])
        #expect(index.contains(key("id:p", 0)) && index.contains(key("id:p", 1)))
    }

    @Test func unpinnedBlocksBecomeTheFirstToGo() {
        var index = PinnedBlockIndex(budget: 300)
        index.insert(key("id:p", 0), size: 100)
        index.insert(key("id:a", 0), size: 100)
        #expect(index.setPinned(["id:p"]).isEmpty)   // an existing block moves out of the LRU
        #expect(index.pinnedSize == 100)
        index.insert(key("id:b", 0), size: 100)
        #expect(index.setPinned([]).isEmpty)
        #expect(index.pinnedSize == 0)
        index.insert(key("id:c", 0), size: 100)   // over: the block just unpinned goes before id:a
        #expect(index.evict() == [key("id:p", 0)])
    }

    /// A mount-like setup: a folder of three files (one over several blocks) and a file outside.
    private func fixture(budget: Int64 = 8 << 20) throws -> (InMemoryRemote, FailingRemote, VFS, PinnedFiles, MetadataStore, URL) {
        let remote = InMemoryRemote()
        remote.externalMkdir("/Papers")
        remote.externalWrite("/Papers/a.bin", testBytes(200_000, seed: 1))
        remote.externalWrite("/Papers/b.txt", "b")
        remote.externalMkdir("/Papers/sub")
        remote.externalWrite("/Papers/sub/c.bin", testBytes(70_000, seed: 3))
        remote.externalWrite("/other.bin", testBytes(100_000, seed: 4))
        let failing = FailingRemote(remote)
        let directory = try temporaryDirectory()
        let vfs = try makeVFS(failing) { $0.cacheDirectory = directory; $0.diskCacheBytes = budget }
        let store = try MetadataStore(directory: directory)
        let pins = PinnedFiles(vfs: vfs, store: store, retryDelay: 0.2)
        pins.start()
        return (remote, failing, vfs, pins, store, directory)
    }

    @Test func aPinnedFolderIsOnDiskVerifiedAndReadsWithDownloadsFailing() throws {
        let (remote, failing, vfs, pins, store, directory) = try fixture()
        defer { pins.stop(); store.close(); try? FileManager.default.removeItem(at: directory) }
        let change = try pins.pin("/papers")
        #expect(change.path == "/Papers" && change.files == 3 && change.bytes == 270_001)
        #expect(pins.waitUntilSettled(deadline: Date(timeIntervalSinceNow: 20)))
        let summary = try #require(pins.list().first)
        #expect(summary.path == "/Papers" && summary.exists)
        #expect(summary.counts == PinCounts(files: 3, bytes: 270_001, current: 3, fetching: 0, failed: 0, bytesFetched: 270_001))
        #expect(pins.totals()?.diskBytes == 270_001)
        // Nothing in memory came from the pin: every read below is served by the disk cache.
        failing.setRule { name, _ in name == "download" ? .unavailable("test: no network") : nil }
        #expect(try vfs.readAll(try vfs.resolve("/Papers/a.bin")) == testBytes(200_000, seed: 1))
        #expect(try vfs.readAll(try vfs.resolve("/Papers/b.txt")) == Array("b".utf8))
        #expect(try vfs.readAll(try vfs.resolve("/Papers/sub/c.bin")) == testBytes(70_000, seed: 3))
        #expect(throws: Errno.io) { try vfs.readAll(try vfs.resolve("/other.bin")) }
        #expect(try store.pinnedPaths() == ["/Papers"])
        _ = remote
    }

    @Test func aCorruptedPinnedBlockIsNoticedAndDownloadedAgain() throws {
        let (_, _, vfs, pins, store, directory) = try fixture()
        defer { pins.stop(); store.close(); try? FileManager.default.removeItem(at: directory) }
        _ = try pins.pin("/Papers/a.bin")
        #expect(pins.waitUntilSettled(deadline: Date(timeIntervalSinceNow: 20)))
        // Flip a byte in a block file on disk, then check again as a remount would.
        let blocks = try #require(FileManager.default.enumerator(atPath: directory.appendingPathComponent("blocks").path))
        let file = try #require(blocks.compactMap { $0 as? String }.first { $0.hasSuffix("-1") })
        let url = directory.appendingPathComponent("blocks").appendingPathComponent(file)
        var bytes = try [UInt8](Data(contentsOf: url))
        bytes[10] ^= 0xff
        try Data(bytes).write(to: url)
        let again = PinnedFiles(vfs: vfs, store: store, retryDelay: 0.2)
        again.start()
        defer { again.stop() }
        #expect(again.list().map(\.path) == ["/Papers/a.bin"])
        // The first check fails the hash and drops the blocks; the retry downloads them.
        let deadline = Date(timeIntervalSinceNow: 20)
        while again.totals()?.counts.current != 1 && Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        #expect(again.totals()?.counts.current == 1)
        #expect(try [UInt8](Data(contentsOf: url)) != bytes)
    }

    @Test func aPurgeDuringAPinDownloadFetchesTheFileAgainRatherThanCallingItCurrent() throws {
        let (_, failing, vfs, pins, store, directory) = try fixture()
        defer { pins.stop(); store.close(); try? FileManager.default.removeItem(at: directory) }
        let node = try #require(vfs.metadata.node(try vfs.resolve("/Papers/b.txt")))
        let (id, rev) = (node.id ?? "", node.file?.rev ?? "")
        // The first download of b.txt meets a purge of its file (as when the feed brings a
        // revision): that block is not kept, so the file is not on disk yet.
        let purged = Mutex(false)
        failing.setRule { name, path in
            if name == "download", path.hasSuffix("b.txt"), !purged.withLock({ let was = $0; $0 = true; return was }) {
                vfs.blocks.purge(fileID: id, rev: rev)
            }
            return nil
        }
        _ = try pins.pin("/Papers/b.txt")
        let deadline = Date(timeIntervalSinceNow: 20)
        while pins.totals()?.counts.current != 1 && Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        #expect(purged.withLock { $0 })
        failing.setRule { name, _ in name == "download" ? .unavailable("test: no network") : nil }
        #expect(try vfs.readAll(try vfs.resolve("/Papers/b.txt")) == Array("b".utf8))
    }

    @Test func aPinThatDoesNotFitIsRefusedAndChangesNothing() throws {
        let (_, _, _, pins, store, directory) = try fixture(budget: 250_000)
        defer { pins.stop(); store.close(); try? FileManager.default.removeItem(at: directory) }
        _ = try pins.pin("/Papers/a.bin")
        #expect(throws: PinRefusal.doesNotFit(needed: 70_001, budget: 250_000, pinned: 200_000)) { try pins.pin("/Papers") }
        #expect(pins.list().map(\.path) == ["/Papers/a.bin"])
        #expect(try store.pinnedPaths() == ["/Papers/a.bin"])
        #expect(throws: PinRefusal.notFound) { try pins.pin("/nothing") }
        #expect(throws: PinRefusal.notPinned(within: "/Papers/a.bin")) { try pins.unpin("/Papers/a.bin/x") }
        #expect(throws: PinRefusal.notPinned(within: nil)) { try pins.unpin("/other.bin") }
    }

    @Test func pinnedBlocksSurviveOtherReadsAndUnpinnedOnesAreEvicted() throws {
        // Budget: the pinned 200,000 bytes plus room for about one more file.
        let (remote, _, vfs, pins, store, directory) = try fixture(budget: 340_000)
        defer { pins.stop(); store.close(); try? FileManager.default.removeItem(at: directory) }
        for number in 0..<12 { remote.externalWrite("/churn\(number).bin", testBytes(100_000, seed: UInt64(10 + number))) }
        _ = try pins.pin("/Papers/a.bin")
        #expect(pins.waitUntilSettled(deadline: Date(timeIntervalSinceNow: 20)))
        let disk = try #require(vfs.blocks.disk)
        // Fresh files each time (ones read before are served from memory, writing nothing to disk).
        func churn(_ numbers: Range<Int>) throws {
            for number in numbers {
                _ = try vfs.readAll(try vfs.resolve("/churn\(number).bin"))
                vfs.waitUntilIdle()
            }
        }
        try churn(0..<6)
        #expect(disk.usage.bytes <= 340_000)
        #expect(disk.pinnedBytes == 200_000)
        let node = try #require(vfs.metadata.node(try vfs.resolve("/Papers/a.bin")))
        let pinnedKeys = (0..<4).map { BlockKey(fileID: node.id ?? "", rev: node.file?.rev ?? "", index: UInt64($0)) }
        #expect(pinnedKeys.allSatisfy { disk.contains($0) })
        let change = try pins.unpin("/papers/A.BIN")
        #expect(change.files == 1 && change.bytes == 200_000)
        #expect(disk.pinnedBytes == 0)
        try churn(6..<12)
        #expect(disk.usage.bytes <= 340_000)
        #expect(!pinnedKeys.contains { disk.contains($0) })
        #expect(pins.totals() == nil)
        #expect(try store.pinnedPaths() == [])
    }
}
