/// `VFS.restoreRevision` (dbxfs restore and undelete) against the in-memory fake: the tree shows
/// the restored revision at once and names what the kernel must forget, the next write commits as
/// an update of the restored rev (no conflicted copy of itself), a feed batch fetched before the
/// restore cannot undo it, and it is refused over local changes not on Dropbox yet, over an
/// existing file (undelete) and on a read-only mount. The remote restore is the closure's
/// business; here another device's write of the old bytes stands in for files/restore.
import Foundation
import Testing
@testable import VFSCache

@Suite struct VFSRestoreTests {
    typealias Writable = VFSWriteTests.Writable

    @Test func theTreeShowsTheRestoredRevisionAndTheNextWriteUpdatesIt() throws {
        let remote = InMemoryRemote()
        remote.externalWrite("/f.txt", "old bytes")
        remote.externalWrite("/f.txt", "newer")
        let w = try Writable(remote)
        let ino = try w.vfs.resolve("/f.txt")
        #expect(try w.vfs.readAll(ino) == Array("newer".utf8))
        let (entry, invalidations) = try w.vfs.restoreRevision(at: "/f.txt", replacing: true) { () throws(RemoteError) -> RemoteEntry in
            remote.externalWrite("/f.txt", Array("old bytes".utf8))
        }
        #expect(invalidations == [.inode(ino)])
        #expect(try w.vfs.getattr(ino).0.size == 9)
        #expect(try w.vfs.readAll(ino) == Array("old bytes".utf8))
        #expect(try w.vfs.getxattr(ino, name: "user.dropbox.rev") == Array(entry.rev!.utf8))

        let appender = try w.vfs.open(ino, flags: [.write, .append])
        _ = try Array("!".utf8).withUnsafeBytes { (bytes) throws(Errno) in try w.vfs.write(ino, handle: appender.handle, offset: 0, data: bytes) }
        try w.vfs.flush(ino, handle: appender.handle)
        w.vfs.release(ino, handle: appender.handle)
        w.sync()
        #expect(remote.content("/f.txt") == Array("old bytes!".utf8))
        #expect(remote.allPaths() == ["/f.txt"])   // no conflicted copy
    }

    @Test func aFeedBatchFetchedBeforeTheRestoreDoesNotUndoIt() throws {
        let remote = InMemoryRemote()
        remote.externalWrite("/f.txt", "v1")
        remote.externalWrite("/f.txt", "v2, longer")
        let w = try Writable(remote)
        let ino = try w.vfs.resolve("/f.txt")
        let stamp = w.vfs.metadata.fetchStamp()
        let before = try #require(try remote.metadata(path: "/f.txt"))
        let (entry, _) = try w.vfs.restoreRevision(at: "/f.txt", replacing: true) { () throws(RemoteError) -> RemoteEntry in
            remote.externalWrite("/f.txt", Array("v1".utf8))
        }
        // The feed's answer was on its way while the restore ran: it still names the old rev.
        _ = w.vfs.metadata.applyFeed([.upsert(before)], cursor: "stale", since: stamp)
        #expect(w.vfs.metadata.node(ino)?.file?.rev == entry.rev)
        #expect(try w.vfs.readAll(ino) == Array("v1".utf8))
    }

    @Test func refusedWhileTheFileHasBytesNotOnDropboxYet() throws {
        let remote = InMemoryRemote()
        remote.externalWrite("/f.txt", "v1")
        remote.externalWrite("/f.txt", "v2")
        let w = try Writable(remote)
        let ino = try w.vfs.resolve("/f.txt")
        let writer = try w.vfs.open(ino, flags: [.write, .append])
        _ = try Array("+".utf8).withUnsafeBytes { (bytes) throws(Errno) in try w.vfs.write(ino, handle: writer.handle, offset: 0, data: bytes) }
        var called = false
        #expect(throws: RevisionRestoreRefusal.localChanges) {
            _ = try w.vfs.restoreRevision(at: "/f.txt", replacing: true) { () throws(RemoteError) -> RemoteEntry in
                called = true
                return remote.externalWrite("/f.txt", Array("v1".utf8))
            }
        }
        #expect(!called)
        try w.vfs.flush(ino, handle: writer.handle)
        w.vfs.release(ino, handle: writer.handle)
        // Closed but not uploaded yet is refused too; once on Dropbox, the restore goes ahead.
        w.sync()
        #expect(remote.content("/f.txt") == Array("v2+".utf8))
        _ = try w.vfs.restoreRevision(at: "/f.txt", replacing: true) { () throws(RemoteError) -> RemoteEntry in
            remote.externalWrite("/f.txt", Array("v1".utf8))
        }
        #expect(try w.vfs.readAll(ino) == Array("v1".utf8))
    }

    /// `dbxfs sync` then `dbxfs restore`: once sync says the file is on Dropbox, the restore goes
    /// ahead, even while the commit's event has not reached the tree yet (the engine delivers it on
    /// its own queue; here that queue is held up as a loaded machine would).
    @Test func aRestoreRightAfterSyncWaitsForTheCommitToReachTheTree() throws {
        let remote = InMemoryRemote()
        remote.externalWrite("/f.txt", "v1")
        remote.externalWrite("/f.txt", "v2")
        let w = try Writable(remote)
        let engine = try #require(w.vfs.writeBack)
        let ino = try w.vfs.resolve("/f.txt")
        let writer = try w.vfs.open(ino, flags: [.write, .append])
        _ = try Array("+".utf8).withUnsafeBytes { (bytes) throws(Errno) in try w.vfs.write(ino, handle: writer.handle, offset: 0, data: bytes) }
        let held = DispatchSemaphore(value: 0)
        engine.eventQueue.async { _ = held.wait(timeout: .now() + 30) }
        try w.vfs.flush(ino, handle: writer.handle)
        w.vfs.release(ino, handle: writer.handle)
        w.sync()
        DispatchQueue.global().asyncAfter(deadline: .now() + 0.5) { held.signal() }
        _ = try w.vfs.restoreRevision(at: "/f.txt", replacing: true) { () throws(RemoteError) -> RemoteEntry in
            remote.externalWrite("/f.txt", Array("v1".utf8))
        }
        #expect(try w.vfs.readAll(ino) == Array("v1".utf8))
    }

    @Test func undeleteShowsTheFileAndItsFolderAndRefusesWhatExists() throws {
        let remote = InMemoryRemote()
        remote.externalWrite("/keep.txt", "k")
        let w = try Writable(remote)
        #expect(throws: Errno.noEntry) { try w.vfs.resolve("/gone/back.txt") }
        let (_, invalidations) = try w.vfs.restoreRevision(at: "/gone/back.txt", replacing: false) { () throws(RemoteError) -> RemoteEntry in
            remote.externalWrite("/gone/back.txt", Array("back".utf8))
        }
        #expect(invalidations.contains(.entry(parent: rootInode, name: "gone")))
        let ino = try w.vfs.resolve("/gone/back.txt")
        #expect(try w.vfs.readAll(ino) == Array("back".utf8))
        #expect(throws: RevisionRestoreRefusal.exists) {
            _ = try w.vfs.restoreRevision(at: "/keep.txt", replacing: false) { () throws(RemoteError) -> RemoteEntry in
                remote.externalWrite("/keep.txt", Array("k".utf8))
            }
        }
        #expect(throws: RevisionRestoreRefusal.notFound) {
            _ = try w.vfs.restoreRevision(at: "/nothing.txt", replacing: true) { () throws(RemoteError) -> RemoteEntry in
                remote.externalWrite("/nothing.txt", [])
            }
        }
    }

    @Test func aReadOnlyMountRefuses() throws {
        let remote = InMemoryRemote()
        remote.externalWrite("/f.txt", "v1")
        let vfs = try makeVFS(remote)
        #expect(throws: RevisionRestoreRefusal.readOnly) {
            _ = try vfs.restoreRevision(at: "/f.txt", replacing: true) { () throws(RemoteError) -> RemoteEntry in
                remote.externalWrite("/f.txt", Array("v0".utf8))
            }
        }
    }
}
