/// Writes and truncates of one file arriving at once, as the kernel sends them for a file that is
/// written through a mapping (its writeback threads) while the program truncates it: each
/// operation's view of the file's size must be the one the tree keeps after it.
import Foundation
import Synchronization
import Testing
@testable import VFSCache

@Suite struct VFSConcurrentWriteTests {
    /// xfstests' fsx with mappings on a mount without passthrough: "Size error: expected 0xbd037
    /// stat 0xa4232" right after a TRUNCATE UP. A write that computed the size under the file's
    /// lock set it in the tree after letting go of the lock, so a truncate in between was undone.
    @Test func aWriteRacingATruncateNeverPutsBackTheSizeBeforeIt() throws {
        let remote = InMemoryRemote()
        let w = try VFSWriteTests.Writable(remote)
        let (ino, handle) = try createdForWriting(w)
        let vfs = w.vfs
        try VFSWriteTests().write(vfs, ino, handle, at: 0, testBytes(8192, seed: 1))

        let stop = Atomic<Bool>(false)
        let writer = Thread {
            let bytes = testBytes(512, seed: 2)
            var offset: UInt64 = 0
            while !stop.load(ordering: .relaxed) {
                _ = try? bytes.withUnsafeBytes { (buffer) throws(Errno) -> Int in
                    try vfs.write(ino, handle: handle, offset: offset, data: buffer)
                }
                offset = (offset + 512) % 4096
            }
        }
        writer.start()
        defer { stop.store(true, ordering: .relaxed) }

        var wrong: [(truncatedTo: UInt64, seen: UInt64)] = []
        for size in UInt64(8193)...UInt64(10_192) {
            _ = try vfs.setattr(ino, changes: AttributeChanges(size: size), handle: handle)
            let seen = try vfs.getattr(ino).0.size
            if seen != size { wrong.append((size, seen)) }
        }
        stop.store(true, ordering: .relaxed)
        #expect(wrong.isEmpty, "sizes after truncates: \(wrong.prefix(5))")
        try VFSWriteTests().close(vfs, ino, handle)
    }

    /// fsx with mappings on a mount without passthrough: "Size error: expected 0x61186 stat
    /// 0xce939" right after an fsync and a truncate. The facade's handler of the fsync's commit
    /// decided that no newer bytes were pending, then a truncate began a new period of changes,
    /// and then the handler made the tree show the commit: the truncate's size was gone.
    @Test func aTruncateRightAfterACommitKeepsItsSize() throws {
        let remote = InMemoryRemote()
        let w = try VFSWriteTests.Writable(remote)
        let (ino, handle) = try createdForWriting(w)
        var wrong: [(round: Int, truncatedTo: UInt64, seen: UInt64)] = []
        for round in 0..<300 {
            let size = UInt64(20_000 + round % 2 * 5_000)
            try VFSWriteTests().write(w.vfs, ino, handle, at: 0, testBytes(Int(size), seed: UInt64(round)))
            try w.vfs.fsync(ino, handle: handle)
            let cut = UInt64(1_000 + round)
            _ = try w.vfs.setattr(ino, changes: AttributeChanges(size: cut), handle: handle)
            // Let the commit's handler run, then look.
            Thread.sleep(forTimeInterval: 0.001)
            let seen = try w.vfs.getattr(ino).0.size
            if seen != cut { wrong.append((round, cut, seen)) }
        }
        #expect(wrong.isEmpty, "sizes after truncates: \(wrong.prefix(5))")
        try VFSWriteTests().close(w.vfs, ino, handle)
        w.sync()
    }

    /// `ftruncate` + `fsync` + `fstat` in a loop on a loaded machine (the judges' repro
    /// `truncate_fsync_fstat_existing.py`): fstat showed the size of the commit before the last one.
    /// The engine's commit events wait on its event queue: when the handler of one commit ran after
    /// the next truncate had been committed too, it found no bytes pending (the engine held only
    /// the later, already committed staging file) and made the tree show its own, older commit
    /// until the next event came.
    @Test func aCommitsEventHandledAfterALaterCommitDoesNotShowTheOlderSize() throws {
        let remote = InMemoryRemote()
        let w = try VFSWriteTests.Writable(remote)
        let (ino, handle) = try createdForWriting(w)
        try VFSWriteTests().write(w.vfs, ino, handle, at: 0, testBytes(30_000, seed: 1))
        try w.vfs.fsync(ino, handle: handle)
        let events = try #require(w.vfs.writeBack).eventQueue
        events.sync {}

        // The handlers of the next two commits wait, as on a loaded machine.
        let first = DispatchSemaphore(value: 0), second = DispatchSemaphore(value: 0)
        let reachedSecond = DispatchSemaphore(value: 0)
        events.async { first.wait() }
        _ = try w.vfs.setattr(ino, changes: AttributeChanges(size: 10_000), handle: handle)
        try w.vfs.fsync(ino, handle: handle)       // its event is queued behind `first`
        events.async { reachedSecond.signal(); second.wait() }
        _ = try w.vfs.setattr(ino, changes: AttributeChanges(size: 20_000), handle: handle)
        try w.vfs.fsync(ino, handle: handle)       // queued behind `second`
        #expect(try w.vfs.getattr(ino).0.size == 20_000)

        // The first commit's handler runs now, the second's not yet.
        first.signal()
        reachedSecond.wait()
        let seen = try w.vfs.getattr(ino).0.size
        #expect(seen == 20_000, "the handler of the commit of 10,000 bytes made the tree show \(seen) over the later commit")
        second.signal()
        events.sync {}
        #expect(try w.vfs.getattr(ino).0.size == 20_000)
        #expect(try w.vfs.readAll(ino) == Array(testBytes(30_000, seed: 1).prefix(10_000)) + [UInt8](repeating: 0, count: 10_000))
        try VFSWriteTests().close(w.vfs, ino, handle)
        w.sync()
        #expect(try remote.metadata(path: "/f.bin")?.size == 20_000)
    }

    /// fsx with mappings on a mount without passthrough: "Size error: expected 0xe5c0a stat
    /// 0x5cb0e", the size of an earlier commit of our own. The feed reports each commit in order,
    /// and Dropbox may end a page between two of them (or send a page empty); applying the page
    /// with the older commit after the tree showed the newer one took the file back in time.
    @Test func theFeedNeverTakesAFileBackToAnOlderCommitOfOurOwn() throws {
        let remote = InMemoryRemote()
        let w = try VFSWriteTests.Writable(remote)
        let (ino, handle) = try createdForWriting(w)
        try VFSWriteTests().write(w.vfs, ino, handle, at: 0, testBytes(3000, seed: 1))
        try w.vfs.fsync(ino, handle: handle)
        let first = try #require(try remote.metadata(path: "/f.bin"))
        try VFSWriteTests().write(w.vfs, ino, handle, at: 3000, testBytes(2000, seed: 2))
        try VFSWriteTests().close(w.vfs, ino, handle)
        w.sync()
        let second = try #require(try remote.metadata(path: "/f.bin"))
        #expect(first.rev != second.rev)
        #expect(eventually { w.vfs.metadata.node(ino)?.file?.rev == second.rev })

        // A page fetched after both commits that ends with the first.
        let stamp = w.vfs.metadata.fetchStamp()
        _ = w.vfs.metadata.applyFeed([.upsert(first)], cursor: "page-1", since: stamp)
        #expect(try w.vfs.getattr(ino).0.size == 5000)
        #expect(w.vfs.metadata.node(ino)?.file?.rev == second.rev)
        #expect(try w.vfs.readAll(ino) == testBytes(3000, seed: 1) + testBytes(2000, seed: 2))
        // The next page brings the second: nothing changes.
        _ = w.vfs.metadata.applyFeed([.upsert(second)], cursor: "page-2", since: stamp)
        #expect(w.vfs.metadata.node(ino)?.file?.rev == second.rev)
    }

    /// The feed may lag many commits behind a file fsynced in a loop (a long page of other changes,
    /// a slow machine), and it then reports each of our commits in turn: none of them may take the
    /// file back, however far behind (`ShownRevisions` kept only the last 8 revs of a file). The
    /// revs the feed has passed are forgotten.
    @Test func aFeedManyCommitsBehindNeverTakesAFileBack() throws {
        let remote = InMemoryRemote()
        let w = try VFSWriteTests.Writable(remote)
        let (ino, commits) = try truncatedAndCommitted(w, remote, times: 30)
        #expect(eventually { w.vfs.metadata.node(ino)?.file?.rev == commits.last?.rev })
        // The feed catches up, one commit per page.
        var wentBack: [UInt64] = []
        for (index, commit) in commits.enumerated() {
            _ = w.vfs.metadata.applyFeed([.upsert(commit)], cursor: "page-\(index)", since: w.vfs.metadata.fetchStamp())
            let seen = try w.vfs.getattr(ino).0.size
            if seen != 1_029 { wentBack.append(seen) }
        }
        #expect(wentBack.isEmpty, "sizes shown while the feed caught up: \(wentBack)")
        #expect(w.vfs.metadata.locked { _ in w.vfs.metadata.shownRevisions.keptCount } == 1, "only the rev the feed reported last is kept")
        // Another client's change after ours still shows.
        let theirs = remote.externalWrite("/f.bin", testBytes(77))
        _ = w.vfs.metadata.applyFeed([.upsert(theirs)], cursor: "page-theirs", since: w.vfs.metadata.fetchStamp())
        #expect(try w.vfs.getattr(ino).0.size == 77)
    }

    /// Our commits, then another client's version that the tree learned from a fetch of its own
    /// (a recheck of the feed, a listing) before the feed reported our commits: a page with one
    /// of ours must not take the file back from theirs (`ShownRevisions` knew only our revs, so
    /// the order of theirs against ours was unknown).
    @Test func aFeedBehindNeverTakesAFileBackFromAnotherClientsVersionAFetchShowed() throws {
        let remote = InMemoryRemote()
        let w = try VFSWriteTests.Writable(remote)
        let (ino, ours) = try truncatedAndCommitted(w, remote, times: 3)
        #expect(eventually { w.vfs.metadata.node(ino)?.local == .remote })
        let theirs = remote.externalWrite("/f.bin", testBytes(77))
        w.vfs.metadata.refreshFromDropbox(["/f.bin"])
        #expect(try w.vfs.getattr(ino).0.size == 77)
        var shown: [UInt64] = []
        for (index, commit) in (ours + [theirs]).enumerated() {
            _ = w.vfs.metadata.applyFeed([.upsert(commit)], cursor: "page-\(index)", since: w.vfs.metadata.fetchStamp())
            shown.append(try w.vfs.getattr(ino).0.size)
        }
        #expect(shown == [77, 77, 77, 77], "sizes shown while the feed caught up")
    }

    /// A descriptor opened for reading before another descriptor of the mount writes the file
    /// reads what was written, as on a local disk (docs/SEMANTICS.md, "Reading"). It read the
    /// version it opened until the commit was shown (the judges' helper
    /// `hunt_reader_opened_before.py`: "fstat 30232, pread 30000").
    @Test func aReaderOpenedBeforeAnotherDescriptorWritesReadsTheWrite() throws {
        let (_, w, ino, reader) = try openedForReading()
        #expect(try w.vfs.read(ino, handle: reader.handle, offset: 0, size: 40_000).count == 30_000)
        let writer = try w.vfs.open(ino, flags: [.read, .write])
        try VFSWriteTests().write(w.vfs, ino, writer.handle, at: 30_000, testBytes(232, seed: 2))
        try w.vfs.fsync(ino, handle: writer.handle)
        let seen = try w.vfs.read(ino, handle: reader.handle, offset: 0, size: 40_000)
        let sawTheWrite = seen == testBytes(30_000, seed: 1) + testBytes(232, seed: 2)
        #expect(sawTheWrite, "the reader read \(seen.count) bytes, not the 30232 written")
        // Still after the commit, and again for the next change (a truncate without a handle).
        try VFSWriteTests().close(w.vfs, ino, writer.handle)
        w.sync()
        #expect(try w.vfs.read(ino, handle: reader.handle, offset: 0, size: 40_000).count == 30_232)
        _ = try w.vfs.setattr(ino, changes: AttributeChanges(size: 100), handle: nil)
        #expect(try w.vfs.read(ino, handle: reader.handle, offset: 0, size: 40_000) == testBytes(100, seed: 1))
        w.vfs.release(ino, handle: reader.handle)
        w.sync()
        #expect(w.vfs.localFiles.existing(ino) == nil, "the file's local record outlived its last reader")
    }

    /// While a descriptor of the mount writes a file through the kernel's page cache, other opens
    /// keep the kernel's pages: an open that drops them can drop a page holding a write still on
    /// its way to the mount, and a read then fills it from bytes without that write
    /// (`hunt_reader_prefix.py` read zeros where a write had been; `pagesFollowLocalWrites`).
    /// The first writer's open drops them (the server's version), and so does the first open
    /// after our bytes became a conflicted copy.
    @Test func opensWhileTheMountWritesKeepTheKernelsPages() throws {
        let (remote, w, ino, first) = try openedForReading()
        let writer = try w.vfs.open(ino, flags: [.read, .write])
        #expect(!writer.keepCache, "the first writer's open must drop pages of the server's version")
        try VFSWriteTests().write(w.vfs, ino, writer.handle, at: 30_000, testBytes(232, seed: 2))
        let during = try w.vfs.open(ino, flags: .read)
        #expect(during.keepCache)
        let secondWriter = try w.vfs.open(ino, flags: [.read, .write])
        #expect(secondWriter.keepCache)
        try VFSWriteTests().close(w.vfs, ino, secondWriter.handle)
        w.vfs.release(ino, handle: during.handle)
        // Another client changes the file before our bytes are committed: ours become a
        // conflicted copy while the writer is still open, and the pages are no longer the file's,
        // also once the writer writes again (on their version).
        remote.externalWrite("/f.bin", testBytes(500, seed: 3))
        try w.vfs.fsync(ino, handle: writer.handle)
        w.vfs.waitUntilIdle()
        #expect(remote.allPaths().contains { $0.contains("conflicted copy") }, "\(remote.allPaths())")
        try VFSWriteTests().write(w.vfs, ino, writer.handle, at: 0, testBytes(10, seed: 4))
        let afterConflict = try w.vfs.open(ino, flags: .read)
        #expect(!afterConflict.keepCache)
        // That open dropped them; the writer's later writes go through the page cache again.
        let next = try w.vfs.open(ino, flags: .read)
        #expect(next.keepCache)
        w.vfs.release(ino, handle: next.handle)
        w.vfs.release(ino, handle: afterConflict.handle)
        try VFSWriteTests().close(w.vfs, ino, writer.handle)
        w.sync()
        w.vfs.release(ino, handle: first.handle)
    }

    /// A reader that read the mount's bytes keeps reading them when they become a conflicted copy
    /// (or a restore replaces them): it never goes back to the version it opened, which was
    /// never current again (docs/SEMANTICS.md, "Conflicts": reads through a descriptor that read
    /// our pending bytes return those).
    @Test func aReaderThatReadOurBytesKeepsThemWhenTheyBecomeAConflictedCopy() throws {
        let (remote, w, ino, reader, writer) = try readerThenAnotherDescriptorWrites()
        #expect(try w.vfs.read(ino, handle: reader.handle, offset: 0, size: 40_000) == ours)
        remote.externalWrite("/f.bin", testBytes(500, seed: 3))
        try w.vfs.fsync(ino, handle: writer.handle)
        w.vfs.waitUntilIdle()
        #expect(remote.allPaths().contains { $0.contains("conflicted copy") }, "\(remote.allPaths())")
        let afterConflict = try w.vfs.read(ino, handle: reader.handle, offset: 0, size: 40_000)
        #expect(afterConflict == ours, "the reader read \(afterConflict.count) bytes, not the 30232 it had read")
        try VFSWriteTests().close(w.vfs, ino, writer.handle)
        w.sync()
        #expect(try w.vfs.read(ino, handle: reader.handle, offset: 0, size: 40_000) == ours)
        w.vfs.release(ino, handle: reader.handle)
    }

    /// The same when `dbxfs restore` replaces our committed bytes: the reader that read them goes
    /// on with them, as with another client's change after it opened.
    @Test func aReaderThatReadOurBytesKeepsThemWhenARestoreReplacesThem() throws {
        let (remote, w, ino, reader, writer) = try readerThenAnotherDescriptorWrites()
        try VFSWriteTests().close(w.vfs, ino, writer.handle)
        w.sync()
        #expect(try w.vfs.read(ino, handle: reader.handle, offset: 0, size: 40_000) == ours)
        _ = try w.vfs.restoreRevision(at: "/f.bin", replacing: true) { () throws(RemoteError) -> RemoteEntry in
            remote.externalWrite("/f.bin", testBytes(30_000, seed: 1))
        }
        let afterRestore = try w.vfs.read(ino, handle: reader.handle, offset: 0, size: 40_000)
        #expect(afterRestore == ours, "the reader read \(afterRestore.count) bytes, not the 30232 it had read")
        let fresh = try w.vfs.open(ino, flags: .read)
        #expect(try w.vfs.read(ino, handle: fresh.handle, offset: 0, size: 40_000) == testBytes(30_000, seed: 1))
        w.vfs.release(ino, handle: fresh.handle)
        w.vfs.release(ino, handle: reader.handle)
    }

    /// A reader follows the mount's own writes, never another client's: a change made elsewhere
    /// after it opened is not what it reads (docs/SEMANTICS.md, "Reading").
    @Test func aReaderOpenedBeforeAnotherClientsChangeKeepsReadingItsVersion() throws {
        let (remote, w, ino, reader) = try openedForReading()
        // (Read once first: the fake keeps no old revisions to download.)
        #expect(try w.vfs.read(ino, handle: reader.handle, offset: 0, size: 40_000).count == 30_000)
        remote.externalWrite("/f.bin", testBytes(500, seed: 3))
        _ = try w.vfs.metadata.refreshedNode(ino)
        #expect(try w.vfs.read(ino, handle: reader.handle, offset: 0, size: 40_000) == testBytes(30_000, seed: 1))
        w.vfs.release(ino, handle: reader.handle)
    }

    /// `/f.bin` made, then truncated to 1000, 1001, … bytes with an fsync after each, closed and
    /// synced: its inode and the entry of each commit, in order.
    private func truncatedAndCommitted(_ w: VFSWriteTests.Writable, _ remote: InMemoryRemote,
                                       times: Int) throws -> (InodeNumber, [RemoteEntry]) {
        let (ino, handle) = try createdForWriting(w)
        var commits: [RemoteEntry] = []
        for round in 0..<times {
            _ = try w.vfs.setattr(ino, changes: AttributeChanges(size: UInt64(1_000 + round)), handle: handle)
            try w.vfs.fsync(ino, handle: handle)
            commits.append(try #require(try remote.metadata(path: "/f.bin")))
        }
        try VFSWriteTests().close(w.vfs, ino, handle)
        w.sync()
        return (ino, commits)
    }

    /// The bytes `readerThenAnotherDescriptorWrites` leaves the file with.
    private let ours = testBytes(30_000, seed: 1) + testBytes(232, seed: 2)

    /// `openedForReading`, read whole once, then another descriptor of the mount appends 232
    /// bytes (still open for writing).
    private func readerThenAnotherDescriptorWrites() throws -> (InMemoryRemote, VFSWriteTests.Writable, InodeNumber, OpenReply, OpenReply) {
        let (remote, w, ino, reader) = try openedForReading()
        #expect(try w.vfs.read(ino, handle: reader.handle, offset: 0, size: 40_000).count == 30_000)
        let writer = try w.vfs.open(ino, flags: [.read, .write])
        try VFSWriteTests().write(w.vfs, ino, writer.handle, at: 30_000, testBytes(232, seed: 2))
        return (remote, w, ino, reader, writer)
    }

    /// `/f.bin` on Dropbox (30,000 bytes) and open for reading on a writable mount.
    private func openedForReading() throws -> (InMemoryRemote, VFSWriteTests.Writable, InodeNumber, OpenReply) {
        let remote = InMemoryRemote()
        remote.externalWrite("/f.bin", testBytes(30_000, seed: 1))
        let w = try VFSWriteTests.Writable(remote)
        let ino = try w.vfs.lookup(parent: rootInode, name: "f.bin").attributes.ino
        return (remote, w, ino, try w.vfs.open(ino, flags: .read))
    }

    /// `/f.bin`, made and open for reading and writing: its inode and the handle.
    private func createdForWriting(_ w: VFSWriteTests.Writable) throws -> (InodeNumber, HandleID) {
        let (entry, open) = try w.vfs.create(parent: rootInode, name: "f.bin", flags: [.read, .write])
        return (entry.attributes.ino, open.handle)
    }
}
