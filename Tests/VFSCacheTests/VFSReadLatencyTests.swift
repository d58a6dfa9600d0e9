/// What a read waits for and what it downloads, at the real block size (4 MiB) and fragment size:
/// a random read fetches a fragment, not its whole block; parallel random readers of one block
/// download at the same time; a reader gets its bytes of a block still arriving; and the
/// content-hash check stays whole-file and honest through all of that.
import Foundation
import Synchronization
import Testing
@testable import VFSCache

@Suite struct VFSReadLatencyTests {
    private static let block = 4 << 20

    /// The defaults of a mount for the data path (4 MiB blocks, fragments as shipped), with no
    /// block completed in the background, whatever the machine's load does to round trips (the
    /// tests count downloads).
    private func realSizes(_ config: inout VFSConfig) {
        config.blockSize = Self.block
        config.memoryCacheBytes = 64 << 20
        config.readAheadMaxBytes = 16 << 20
        config.prefetchThreshold = 256 << 10
        config.completeBlocksAfterRoundTrip = .infinity
    }

    /// Reads `size` bytes at `offset` through `handle` on another thread; nil if it did not
    /// return within `seconds`.
    private func readWithin(_ seconds: Double, _ vfs: VFS, _ file: InodeNumber, _ handle: HandleID,
                            offset: UInt64, size: Int) -> [UInt8]? {
        let result = Mutex<[UInt8]?>(nil)
        let done = DispatchSemaphore(value: 0)
        Thread {
            result.withLock { $0 = try? vfs.read(file, handle: handle, offset: offset, size: size) }
            done.signal()
        }.start()
        return done.wait(timeout: .now() + seconds) == .success ? result.withLock { $0 } : nil
    }

    /// `bytes` (what the handle returned so far) followed by the rest of the file, read on through
    /// the same handle in 1 MiB reads, as `cat` would (so its content-hash check sees every read).
    private func readOn(_ vfs: VFS, _ file: InodeNumber, _ handle: HandleID, after bytes: [UInt8]) throws -> [UInt8] {
        var all = bytes
        while true {
            let more = try vfs.read(file, handle: handle, offset: UInt64(all.count), size: 1 << 20)
            if more.isEmpty { return all }
            all += more
        }
    }

    /// A 4 KiB read at a random offset downloads an aligned fragment around it, not 4 MiB; the
    /// next read in the same fragment downloads nothing; a whole sequential read afterwards
    /// fetches whole blocks (the fragments do not count for it) and is checked.
    @Test func aRandomReadDownloadsAFragmentNotItsWholeBlock() throws {
        let inner = InMemoryRemote()
        let data = testBytes(4 * Self.block + 1000)
        inner.externalWrite("/db.sqlite", data)
        let log = LogCapture()
        let vfs = try makeVFS(inner, log: log, realSizes)
        defer { vfs.shutdown() }
        let file = try vfs.resolve("/db.sqlite")
        let handle = try vfs.open(file, flags: .read).handle
        inner.resetCounts()
        let offset = 2 * Self.block + 300_000
        #expect(try vfs.read(file, handle: handle, offset: UInt64(offset), size: 4096) == Array(data[offset..<(offset + 4096)]))
        #expect(inner.downloadedBytes <= 128 << 10)
        #expect(try vfs.read(file, handle: handle, offset: UInt64(offset + 8192), size: 4096) == Array(data[(offset + 8192)..<(offset + 12_288)]))
        #expect(inner.downloadedBytes <= 128 << 10)
        // A bigger read after a seek (more than a block away: nearer counts as sequential) fetches
        // about its own size, still not the block.
        inner.resetCounts()
        let big = 1_000_000
        #expect(try vfs.read(file, handle: handle, offset: UInt64(big), size: 300_000) == Array(data[big..<(big + 300_000)]))
        #expect(inner.downloadedBytes <= 1 << 20)
        vfs.release(file, handle: handle)

        #expect(try vfs.readAll(file, chunk: 1 << 20) == data)
        vfs.waitUntilIdle()
        #expect(log.contains("content hash verified"))
    }

    /// At a long round trip a random read still waits for its fragment only, and its whole block
    /// follows in the background, so later reads anywhere in it cost no download; at a short
    /// round trip nothing follows.
    @Test func aRandomReadAtALongRoundTripCompletesItsBlockInTheBackground() throws {
        let inner = InMemoryRemote()
        let data = testBytes(4 * Self.block)
        inner.externalWrite("/far", data)
        inner.externalWrite("/near", data)
        let slow = ObservedRemote(inner, downloadDelay: 0.3)
        let vfs = try makeVFS(slow) { config in
            realSizes(&config)
            config.completeBlocksAfterRoundTrip = 0.2
        }
        defer { vfs.shutdown() }
        let far = try vfs.resolve("/far")
        let handle = try vfs.open(far, flags: .read).handle
        defer { vfs.release(far, handle: handle) }
        let offset = 2 * Self.block + 2_000_000
        #expect(try vfs.read(far, handle: handle, offset: UInt64(offset), size: 4096) == Array(data[offset..<(offset + 4096)]))
        vfs.waitUntilIdle()
        #expect(slow.downloadedRanges.contains { $0 == UInt64(2 * Self.block)..<UInt64(3 * Self.block) })
        slow.reset()
        let other = 2 * Self.block + 100_000
        #expect(try vfs.read(far, handle: handle, offset: UInt64(other), size: 4096) == Array(data[other..<(other + 4096)]))
        #expect(slow.downloadedRanges.isEmpty)

        // No delay: the round trip is short, nothing but the fragment is fetched.
        let quick = ObservedRemote(inner)
        let vfs2 = try makeVFS(quick) { config in
            realSizes(&config)
            config.completeBlocksAfterRoundTrip = 0.2
        }
        defer { vfs2.shutdown() }
        let near = try vfs2.resolve("/near")
        let handle2 = try vfs2.open(near, flags: .read).handle
        defer { vfs2.release(near, handle: handle2) }
        #expect(try vfs2.read(near, handle: handle2, offset: UInt64(offset), size: 4096) == Array(data[offset..<(offset + 4096)]))
        vfs2.waitUntilIdle()
        #expect(quick.downloadedRanges.allSatisfy { $0.count <= 128 << 10 })
    }

    /// Two readers of one file at two offsets in the same 4 MiB block, at once: two downloads in
    /// flight together, neither waiting for the other's (nor for 4 MiB).
    @Test func parallelRandomReadersOfOneBlockOverlapTheirDownloads() throws {
        let inner = InMemoryRemote()
        let data = testBytes(2 * Self.block)
        inner.externalWrite("/f", data)
        let remote = ObservedRemote(inner, downloadDelay: 0.3)
        let vfs = try makeVFS(remote, realSizes)
        defer { vfs.shutdown() }
        let file = try vfs.resolve("/f")
        let handles = [try vfs.open(file, flags: .read).handle, try vfs.open(file, flags: .read).handle]
        defer { handles.forEach { vfs.release(file, handle: $0) } }
        let offsets = [Self.block + 1_000_000, Self.block + 3_000_000]
        let results = Mutex<[Int: [UInt8]]>([:])
        let done = DispatchSemaphore(value: 0)
        for (handle, offset) in zip(handles, offsets) {
            Thread {
                let bytes = try? vfs.read(file, handle: handle, offset: UInt64(offset), size: 4096)
                results.withLock { $0[offset] = bytes }
                done.signal()
            }.start()
        }
        for _ in offsets { #expect(done.wait(timeout: .now() + 20) == .success) }
        for offset in offsets { #expect(results.withLock { $0[offset] } == Array(data[offset..<(offset + 4096)])) }
        #expect(remote.maxConcurrentDownloads == 2)
        #expect(remote.downloadedRanges.allSatisfy { $0.count <= 128 << 10 })
    }

    /// The first read of a cold file returns once its own bytes have arrived, while the rest of
    /// the block is still on its way; the same handle then reads the file through and the whole
    /// file is still checked against its content hash (the piece's digest is taken once the
    /// block is whole).
    @Test func aReaderGetsTheFirstBytesBeforeTheBlockIsWhole() throws {
        let inner = InMemoryRemote()
        let data = testBytes(Self.block + 5000)
        inner.externalWrite("/movie.mkv", data)
        let remote = ObservedRemote(inner)
        let log = LogCapture()
        let vfs = try makeVFS(remote, log: log) { config in
            realSizes(&config)
            config.readAheadMaxBytes = 0
        }
        defer { vfs.shutdown() }
        let file = try vfs.resolve("/movie.mkv")
        let handle = try vfs.open(file, flags: .read).handle
        let gate = DispatchSemaphore(value: 0)
        remote.holdAfter.withLock { $0 = (256 << 10, gate) }
        let first = readWithin(10, vfs, file, handle, offset: 0, size: 16 << 10)
        remote.holdAfter.withLock { $0 = nil }
        for _ in 0..<4 { gate.signal() }
        #expect(first != nil, "the first read returned only once its whole block had arrived")
        if let first { #expect(first == Array(data[0..<(16 << 10)])) }

        let all = try readOn(vfs, file, handle, after: first ?? [])
        vfs.release(file, handle: handle)
        #expect(all == data)
        #expect(log.contains("content hash verified"))
    }

    /// A download that breaks off after a reader took its first bytes: that reader keeps them,
    /// the next read of the rest fetches again and gets the right bytes, and the file is not
    /// claimed as checked (the bytes already returned came from a download that never finished).
    @Test func aBlockWhoseDownloadBreaksOffAfterTheFirstBytesIsNotClaimedChecked() throws {
        let inner = InMemoryRemote()
        let data = testBytes(Self.block + 5000)
        inner.externalWrite("/f", data)
        let remote = FailingRemote(inner)
        let log = LogCapture()
        let vfs = try makeVFS(remote, log: log) { config in
            realSizes(&config)
            config.readAheadMaxBytes = 0
        }
        defer { vfs.shutdown() }
        let file = try vfs.resolve("/f")
        let handle = try vfs.open(file, flags: .read).handle
        remote.cutDownloadsAfter.withLock { $0 = 1 << 20 }
        #expect(try vfs.read(file, handle: handle, offset: 0, size: 512 << 10) == Array(data[0..<(512 << 10)]))
        vfs.waitUntilIdle()
        remote.cutDownloadsAfter.withLock { $0 = nil }
        let all = try readOn(vfs, file, handle, after: Array(data[0..<(512 << 10)]))
        vfs.release(file, handle: handle)
        #expect(all == data)
        #expect(!log.contains("content hash verified"))
        #expect(log.contains("content hash not checked"))
    }
}
