/// What random readers get fetched for them in the background when round trips are long
/// (`BackgroundFill`, docs/VFSCACHE.md "Random readers at long round trips"): a small enough file
/// read at random in enough places is fetched whole into the disk cache, each block once; a file
/// over the limit only gets the blocks its reads touched; the fill stops when the file's last
/// handle closes; and random readers' bytes in memory stay within their own budget. Round trips
/// are `ObservedRemote`'s delay; the tests count downloads, never time them.
import Foundation
import Synchronization
import Testing
@testable import VFSCache

@Suite struct VFSRandomFillTests {
    /// 1 MiB blocks of 128 KiB fragments (the mount's 4 MiB would only make the test data slower
    /// to make: the logic is the same).
    private static let block = 1 << 20

    /// A mount's data-path defaults but for the block size, with a disk cache, where a fragment
    /// fetch of 50 ms counts as a long round trip.
    private func config(_ directory: URL, _ change: @escaping (inout VFSConfig) -> Void = { _ in }) -> (inout VFSConfig) -> Void {
        { config in
            config.blockSize = Self.block
            config.memoryCacheBytes = 64 << 20
            config.readAheadMaxBytes = 16 << 20
            config.prefetchThreshold = 256 << 10
            config.completeBlocksAfterRoundTrip = 0.02
            config.fillFilesAfterRoundTrip = 0.02
            config.fillAfterFragmentDownloads = 8   // the mount's 16 would take 16-block reads
            config.cacheDirectory = directory
            change(&config)
        }
    }

    /// Offsets 100,000 bytes into each of `blocks`: each read is a seek (more than a block from
    /// the last), so each is a random read (none in block 0: a handle's first read there would
    /// start a content-hash check, which reads whole blocks).
    private func offsets(inBlocks blocks: [Int]) -> [Int] { blocks.map { $0 * Self.block + 100_000 } }

    /// The whole-block downloads (more than a fragment) among `ranges`.
    private func wholeBlockRanges(_ ranges: [Range<UInt64>]) -> [Range<UInt64>] { ranges.filter { $0.count > 128 << 10 } }

    /// A mount (with a disk cache, `config`) over a `blocks`-block file at `path` behind a remote
    /// whose downloads take `delay`; `body` gets the mount, the file and its bytes. Everything
    /// is shut down and removed after, however `body` ends.
    private func withFile(_ path: String, blocks: Int, delay: TimeInterval, _ change: @escaping (inout VFSConfig) -> Void = { _ in },
                          _ body: (VFS, InodeNumber, [UInt8], ObservedRemote) throws -> Void) throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let inner = InMemoryRemote()
        let data = testBytes(blocks * Self.block)
        inner.externalWrite(path, data)
        let remote = ObservedRemote(inner, downloadDelay: delay)
        let vfs = try makeVFS(remote, config(directory, change))
        defer { vfs.shutdown() }
        try body(vfs, try vfs.resolve(path), data, remote)
    }

    @Test func aFileReadAtRandomAtLongRoundTripsIsFetchedWholeIntoTheDiskCacheOnce() throws {
        try withFile("/vm.img", blocks: 16, delay: 0.05) { vfs, file, data, remote in
            let handle = try vfs.open(file, flags: .read).handle
            defer { vfs.release(file, handle: handle) }
            // Eight blocks of sixteen touched (at least 4 are, a sixty-fourth of a bigger file), with
            // eight fragment downloads timed (`fillAfterFragmentDownloads` here; the first few are
            // not trusted).
            for offset in offsets(inBlocks: [1, 3, 5, 7, 9, 11, 13, 15]) {
                #expect(try vfs.read(file, handle: handle, offset: UInt64(offset), size: 4096) == Array(data[offset..<(offset + 4096)]))
            }
            vfs.waitUntilIdle()
            // Every byte of the file came down in whole-block downloads, and none twice.
            let whole = wholeBlockRanges(remote.downloadedRanges).sorted { $0.lowerBound < $1.lowerBound }
            #expect(whole.reduce(0) { $0 + $1.count } == data.count, "whole-block downloads: \(whole)")
            #expect(zip(whole, whole.dropFirst()).allSatisfy { $0.upperBound == $1.lowerBound } && whole.first?.lowerBound == 0)
            // Into the disk cache, not the sequential readers' memory.
            #expect(vfs.blocks.memory.usage.bytes == 0)
            // Reads anywhere now cost no download.
            remote.reset()
            for offset in offsets(inBlocks: [0, 2, 4, 6, 12, 1]).map({ $0 + 654_321 }) {
                #expect(try vfs.read(file, handle: handle, offset: UInt64(offset), size: 4096) == Array(data[offset..<(offset + 4096)]))
            }
            #expect(remote.downloadedRanges.isEmpty)
        }
    }

    @Test(arguments: [(fillUpTo: Int64(4 << 20), diskBudget: Int64(10) << 30), (fillUpTo: Int64(2) << 30, diskBudget: Int64(16 << 20))])
    func aFileOverTheLimitOrAQuarterOfTheDiskCacheGetsOnlyItsTouchedBlocks(fillUpTo: Int64, diskBudget: Int64) throws {
        try withFile("/big.img", blocks: 16, delay: 0.05, { config in
            config.fillFilesReadAtRandomUpTo = fillUpTo
            config.diskCacheBytes = diskBudget
        }) { vfs, file, data, remote in
            let handle = try vfs.open(file, flags: .read).handle
            defer { vfs.release(file, handle: handle) }
            let touched = [1, 3, 5, 7, 9, 11, 13, 15]
            for offset in offsets(inBlocks: touched) {
                #expect(try vfs.read(file, handle: handle, offset: UInt64(offset), size: 4096) == Array(data[offset..<(offset + 4096)]))
            }
            vfs.waitUntilIdle()
            let whole = Set(wholeBlockRanges(remote.downloadedRanges))
            #expect(whole == Set(touched.map { UInt64($0 * Self.block)..<UInt64(($0 + 1) * Self.block) }))
        }
    }

    @Test func theFillStopsWhenTheFilesLastHandleCloses() throws {
        try withFile("/db", blocks: 16, delay: 0.05) { vfs, file, data, remote in
            let first = try vfs.open(file, flags: .read).handle
            let second = try vfs.open(file, flags: .read).handle
            // Whole-block downloads stop after 256 KiB until the gate opens (fragments never get there).
            let gate = DispatchSemaphore(value: 0)
            remote.holdAfter.withLock { $0 = (256 << 10, gate) }
            for offset in offsets(inBlocks: [1, 3, 5, 7, 9, 11, 13, 15]) {
                #expect(try vfs.read(file, handle: first, offset: UInt64(offset), size: 4096) == Array(data[offset..<(offset + 4096)]))
            }
            // The fill is under way; one handle closing leaves it going, the last one stops it.
            vfs.release(file, handle: first)
            #expect(vfs.blocks.fill.fileIDs.count == 1)
            vfs.release(file, handle: second)
            #expect(vfs.blocks.fill.fileIDs.isEmpty)
            remote.holdAfter.withLock { $0 = nil }
            for _ in 0..<64 { gate.signal() }
            vfs.waitUntilIdle()
            // Nothing was finished: a read of an untouched block downloads its fragment.
            remote.reset()
            let handle = try vfs.open(file, flags: .read).handle
            defer { vfs.release(file, handle: handle) }
            let offset = 2 * Self.block + 300_000
            #expect(try vfs.read(file, handle: handle, offset: UInt64(offset), size: 4096) == Array(data[offset..<(offset + 4096)]))
            #expect(remote.downloadedRanges.first.map { $0.count <= 128 << 10 } == true, "\(remote.downloadedRanges)")
            vfs.waitUntilIdle()
            // And no block was written to the disk cache but (now) block 2, which the read touched.
            #expect(try vfs.blocks.disk.map { disk in try (0..<16).filter { disk.contains(try key(vfs, "/db", block: $0)) } } == [2])
        }
    }

    /// Each reader's first download opens a connection, two more round trips: on a near server the
    /// first fragment fetches look far. They may complete their own blocks, but they do not get
    /// the file filled; the fast ones after them stop even that.
    @Test func theFirstFragmentFetchesDoNotGetAFileFilled() throws {
        try withFile("/near.db", blocks: 16, delay: 0) { vfs, file, data, remote in
            remote.nextFragmentDelays.withLock { $0 = [0.05, 0.05, 0.05, 0.05] }
            let handle = try vfs.open(file, flags: .read).handle
            defer { vfs.release(file, handle: handle) }
            for offset in offsets(inBlocks: [1, 3, 5, 7, 9, 11, 13, 15, 2, 4, 6, 8]) {
                #expect(try vfs.read(file, handle: handle, offset: UInt64(offset), size: 4096) == Array(data[offset..<(offset + 4096)]))
            }
            vfs.waitUntilIdle()
            let whole = Set(wholeBlockRanges(remote.downloadedRanges))
            #expect(whole.isSubset(of: Set([1, 3, 5, 7].map { UInt64($0 * Self.block)..<UInt64(($0 + 1) * Self.block) })),
                    "whole blocks downloaded: \(whole.map { $0.lowerBound / UInt64(Self.block) }.sorted())")
        }
    }

    @Test func randomReadersKeepTheirBytesInMemoryUnderTheirOwnBudget() throws {
        let budget = 1 << 20   // eight fragments
        try withFile("/data.bin", blocks: 12, delay: 0.03, { $0.randomReadMemoryBytes = budget }) { vfs, file, data, _ in
            let handle = try vfs.open(file, flags: .read).handle
            defer { vfs.release(file, handle: handle) }
            var generator = SeededGenerator(seed: 7)
            var most = 0
            for _ in 0..<80 {
                let offset = Int.random(in: 0..<(data.count / 4096), using: &generator) * 4096
                #expect(try vfs.read(file, handle: handle, offset: UInt64(offset), size: 4096) == Array(data[offset..<(offset + 4096)]))
                most = max(most, vfs.blocks.memory.usage.bytes + vfs.blocks.scattered.usage.bytes)
            }
            vfs.waitUntilIdle()
            most = max(most, vfs.blocks.memory.usage.bytes + vfs.blocks.scattered.usage.bytes)
            #expect(most <= budget, "random readers held \(most) bytes of blocks in memory")
            // The file was filled meanwhile (so the reads did go through whole blocks), on disk.
            #expect(try (0..<12).allSatisfy { vfs.blocks.disk?.contains(try key(vfs, "/data.bin", block: $0)) == true })
        }
    }

    /// The key of block `block` of the file at `path` as cached now.
    private func key(_ vfs: VFS, _ path: String, block: Int) throws -> BlockKey {
        let node = try #require(vfs.metadata.node(try vfs.resolve(path)))
        return BlockKey(fileID: try #require(node.id), rev: try #require(node.file?.rev), index: UInt64(block))
    }
}

/// A small deterministic generator (splitmix64), so the random reads are the same every run.
struct SeededGenerator: RandomNumberGenerator {
    private var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
