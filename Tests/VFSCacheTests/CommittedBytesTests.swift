/// What the mount wrote is read back from the disk cache once Dropbox has it, not downloaded
/// again (docs/VFSCACHE.md, "Bytes the mount wrote"): the staging file of a commit whose content
/// hash is ours becomes that revision's copy in the disk cache. Also: reads while the file is
/// dirty come from the staging file, a file still open at its commit is copied in the background,
/// a revision written elsewhere afterwards is downloaded, a staging file written again after its
/// generation was sent is not adopted, a file over half the budget is not kept, and the bytes
/// a crash left between the commit and the adoption are removed at the next start.
import ContentHash
import Foundation
import Synchronization
import Testing
@testable import VFSCache

@Suite struct CommittedBytesTests {
    typealias Writable = VFSWriteTests.Writable

    private func write(_ vfs: VFS, name: String, _ data: [UInt8]) throws -> InodeNumber {
        let (entry, opened) = try vfs.create(parent: rootInode, name: name, flags: [.write])
        let ino = entry.attributes.ino
        _ = try data.withUnsafeBytes { (buffer) throws(Errno) -> Int in try vfs.write(ino, handle: opened.handle, offset: 0, data: buffer) }
        try vfs.flush(ino, handle: opened.handle)
        vfs.release(ino, handle: opened.handle)
        return ino
    }

    /// Names in the staging folder (staging files and bytes handed over at a commit).
    private func stagingNames(_ w: Writable) -> [String] {
        (try? FileManager.default.contentsOfDirectory(atPath: w.directory.appendingPathComponent("staging").path)) ?? []
    }

    @Test func aFileReadBackAfterItsCommitIsServedFromTheDiskCacheWithoutADownload() throws {
        let remote = InMemoryRemote()
        let w = try Writable(remote) { $0.fragmentBytes = 16 << 10 }
        let data = testBytes(200_000)   // four 64 KiB blocks and a partial one
        let ino = try write(w.vfs, name: "written.bin", data)
        // Dirty: read from the staging file.
        #expect(try w.vfs.readAll(ino) == data)
        #expect(remote.calls("download") == 0)
        w.sync()
        #expect(remote.content("/written.bin") == data)
        remote.resetCounts()
        // A random read (fragments are 16 KiB here) finds its block in the copy on disk rather
        // than download a fragment; then the whole file.
        let reply = try w.vfs.open(ino, flags: .read)
        #expect(try w.vfs.read(ino, handle: reply.handle, offset: 150_000, size: 4096) == Array(data[150_000..<154_096]))
        w.vfs.release(ino, handle: reply.handle)
        #expect(try w.vfs.readAll(ino) == data)
        #expect(remote.calls("download") == 0, "downloads: \(remote.calls("download")), \(remote.downloadedBytes) bytes")
        #expect(w.vfs.cacheUsage().diskBytes >= Int64(data.count))
        #expect(stagingNames(w).isEmpty)
    }

    @Test func aFileStillOpenAtItsCommitIsCopiedToTheDiskCache() throws {
        let remote = InMemoryRemote()
        let w = try Writable(remote)
        let data = testBytes(150_000, seed: 7)
        let ino = try write(w.vfs, name: "open.bin", data)
        let reader = try w.vfs.open(ino, flags: .read)   // a reader of the dirty file, open across the commit
        w.sync()
        #expect(try w.vfs.read(ino, handle: reader.handle, offset: 0, size: 1000) == Array(data[0..<1000]))
        w.vfs.release(ino, handle: reader.handle)
        w.vfs.blocks.waitUntilIdle()   // the copy runs in the background
        remote.resetCounts()
        #expect(try w.vfs.readAll(ino) == data)
        #expect(remote.calls("download") == 0)
        #expect(stagingNames(w).isEmpty)
    }

    @Test func aRevisionWrittenElsewhereAfterOurCommitIsDownloaded() throws {
        let remote = InMemoryRemote()
        let w = try Writable(remote)
        let ours = testBytes(100_000, seed: 1)
        let ino = try write(w.vfs, name: "shared.bin", ours)
        w.sync()
        #expect(try w.vfs.readAll(ino) == ours)
        let theirs = testBytes(120_000, seed: 2)
        remote.externalWrite("/shared.bin", theirs)
        remote.resetCounts()
        Thread.sleep(forTimeInterval: 0.7)   // past directoryTTL (0.5 s): the next open refreshes
        _ = try w.vfs.getattr(ino)
        #expect(try w.vfs.readAll(ino) == theirs)
        #expect(remote.calls("download") > 0)
    }

    @Test func aStagingFileWrittenAgainAfterItsGenerationWasSentIsNotAdopted() throws {
        let remote = InMemoryRemote()
        let probe = ProbeRemote(remote)
        // The first commit lands on Dropbox, and its reply is held until the file is being
        // written again: the staging file then holds other bytes than the commit's rev.
        let landed = DispatchSemaphore(value: 0), answer = DispatchSemaphore(value: 0)
        let holding = Mutex(true)
        probe.failAfter { operation, _ in
            if operation == "upload", holding.withLock({ $0 }) {
                holding.withLock { $0 = false }
                landed.signal()
                answer.wait()
            }
            return nil
        }
        let w = try Writable(probe)
        let first = testBytes(100_000, seed: 3), second = testBytes(100_000, seed: 4)
        let ino = try write(w.vfs, name: "busy.bin", first)
        #expect(landed.wait(timeout: .now() + 20) == .success)
        let firstRev = try #require(try remote.metadata(path: "/busy.bin")?.rev)
        let id = try #require(try remote.metadata(path: "/busy.bin")?.id)
        let opened = try w.vfs.open(ino, flags: [.write])
        _ = try second.withUnsafeBytes { (buffer) throws(Errno) -> Int in try w.vfs.write(ino, handle: opened.handle, offset: 0, data: buffer) }
        answer.signal()
        try w.vfs.flush(ino, handle: opened.handle)
        w.vfs.release(ino, handle: opened.handle)
        w.sync()
        w.vfs.blocks.waitUntilIdle()
        #expect(remote.content("/busy.bin") == second)
        #expect(w.vfs.blocks.disk?.wholeFile(fileID: id, rev: firstRev) == nil)
        remote.resetCounts()
        #expect(try w.vfs.readAll(ino) == second)
        #expect(remote.calls("download") == 0)
        #expect(stagingNames(w).isEmpty)
    }

    @Test func aFileOverHalfTheDiskBudgetIsNotKept() throws {
        let remote = InMemoryRemote()
        let w = try Writable(remote) { $0.diskCacheBytes = 100_000 }
        let data = testBytes(60_000, seed: 5)
        let ino = try write(w.vfs, name: "big.bin", data)
        w.sync()
        #expect(w.vfs.cacheUsage().diskBytes == 0)
        #expect(stagingNames(w).isEmpty)
        #expect(try w.vfs.readAll(ino) == data)   // downloaded, as before
    }

    @Test func aCopiedFileIsKeptOnlyIfItsBytesHaveTheRevisionsContentHash() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let disk = try DiskBlockCache(directory: directory, blockSize: 64 << 10, budget: 10 << 20, log: LogCapture().logger)
        let data = testBytes(100_000, seed: 9)
        let source = directory.appendingPathComponent("bytes").path
        func adopt(rev: String, hash: String, size: UInt64 = 100_000) throws -> Bool {
            try Data(data).write(to: URL(fileURLWithPath: source))
            let kept = disk.adoptWholeFile(fileID: "id:f", rev: rev, size: size, contentHash: hash, from: source, move: false)
            #expect(!FileManager.default.fileExists(atPath: source))
            return kept
        }
        // Other bytes than the rev's (written after the hand-over): not kept.
        #expect(try !adopt(rev: "r1", hash: DropboxContentHasher.hash(testBytes(100_000, seed: 10))))
        #expect(disk.usage.bytes == 0)
        // Not the rev's size: not kept.
        #expect(try !adopt(rev: "r2", hash: DropboxContentHasher.hash(data), size: 99_999))
        #expect(disk.usage.bytes == 0)
        #expect(try adopt(rev: "r3", hash: DropboxContentHasher.hash(data)))
        #expect(disk.readArray(BlockKey(fileID: "id:f", rev: "r3", index: 1), length: 100_000 - (64 << 10)) == Array(data[(64 << 10)...]))
        #expect(disk.contains(BlockKey(fileID: "id:f", rev: "r3", index: 0)))
        #expect(!disk.contains(BlockKey(fileID: "id:f", rev: "r1", index: 0)))
    }

    @Test func bytesACrashLeftBetweenTheCommitAndTheAdoptionAreRemovedAtTheNextStart() throws {
        let directory = try temporaryDirectory()
        defer { try? FileManager.default.removeItem(at: directory) }
        let staging = directory.appendingPathComponent("staging")
        try FileManager.default.createDirectory(at: staging, withIntermediateDirectories: true)
        let leftover = staging.appendingPathComponent("17.committed")
        try Data(testBytes(1000)).write(to: leftover)
        _ = try Writable(InMemoryRemote(), directory: directory)
        #expect(!FileManager.default.fileExists(atPath: leftover.path))
    }
}
