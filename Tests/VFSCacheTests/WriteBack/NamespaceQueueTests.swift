/// The write-back engine's namespace queue (NamespaceQueue.swift, NamespaceDispatcher.swift):
/// journaled mkdir, unlink, rmdir and rename, sent in order and in batches of independent
/// operations; uploads wait for the operations on their paths; parent_rev and emptiness checks
/// keep what others changed; offline operations wait and go once Dropbox is back; a kill
/// mid-queue loses nothing.
import ContentHash
import Foundation
import Synchronization
import Testing
@testable import VFSCache

@Suite(.serialized, .timeLimit(.minutes(2))) struct NamespaceQueueTests {
    private func sync(_ engine: WriteBackEngine, seconds: TimeInterval = 20) -> [PendingUpload] {
        engine.waitForAll(deadline: Date().addingTimeInterval(seconds), retryingHeld: true)
    }

    @Test func rmRfOfAThousandFilesInTenFoldersIsTwoBatchesAndTenChecks() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        for folder in 0..<10 { for file in 0..<100 { fixture.memory.externalWrite("/t/d\(folder)/f\(file)", "x") } }
        let revs = Dictionary(uniqueKeysWithValues: try (0..<10).flatMap { folder in
            try (0..<100).map { file in ("/t/d\(folder)/f\(file)", try fixture.memory.metadata(path: "/t/d\(folder)/f\(file)")!.rev!) }
        })
        let engine = try fixture.engine()
        defer { engine.shutdown(drainUntil: nil) }
        fixture.memory.resetCounts()
        // Dropbox answers slowly: what rm -rf does meanwhile gathers behind the first batch.
        fixture.probe.closeGate("deleteBatch")
        // As rm -rf goes: a folder's files, then the folder, folder after folder.
        for folder in 0..<10 {
            for file in 0..<100 {
                let path = "/t/d\(folder)/f\(file)"
                try engine.journalUnlink(path: path, rev: { revs[path] }) { _ in }
            }
            try engine.journalRmdir(path: "/t/d\(folder)") { _ in }
        }
        #expect(fixture.probe.waitUntilBlocked("deleteBatch"))
        fixture.probe.openGate("deleteBatch")
        #expect(sync(engine).isEmpty)
        let batches = fixture.probe.namespaceBatches
        print("rm -rf of 1000 files in 10 folders: \(batches.map { "\($0.operation) × \($0.paths.count)" }), "
              + "\(fixture.memory.calls("listFolder")) emptiness checks")
        #expect(fixture.memory.allPaths() == ["/t"])
        // The first batch sent, then all that gathered behind it (a folder whose files were
        // done joins the files of the others), then the folders left.
        #expect(batches.count <= 3)
        #expect(batches.map(\.paths.count).reduce(0, +) == 1010)
        for folder in 0..<10 {
            let folderBatch = batches.firstIndex { $0.paths.contains("/t/d\(folder)") } ?? -1
            let lastFileBatch = batches.lastIndex { $0.paths.contains { $0.hasPrefix("/t/d\(folder)/") } } ?? .max
            #expect(folderBatch > lastFileBatch, "folder \(folder) deleted before its files")
        }
        #expect(fixture.memory.calls("listFolder") == 10)
        #expect(fixture.memory.calls("delete") == 0 && fixture.memory.calls("metadata") == 0)
    }

    /// A command about a path whose queued change cannot reach Dropbox (`dbxfs undelete` right
    /// after `rm` while Dropbox fails) learns why at once, instead of waiting out its 30 s for the
    /// change (the CLI's test_every_command_says_dropbox_cannot_be_reached passed only while the
    /// change feed's long-poll happened to end within those 30 s).
    @Test func aQueuedOperationThatCannotReachDropboxSaysWhy() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        fixture.memory.externalWrite("/q/x.txt", "x")
        let rev = try fixture.memory.metadata(path: "/q/x.txt")?.rev
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        fixture.probe.failBefore { operation, _ in operation == "deleteBatch" || operation == "delete" ? .unavailable("HTTP 500 (test)") : nil }
        try engine.journalUnlink(path: "/q/x.txt", rev: { rev }) { _ in }
        #expect(engine.unreachableReason(forOperationsTouching: ["/Q/x.txt"]) == nil)   // not tried yet
        #expect(eventually { engine.unreachableReason(forOperationsTouching: ["/q/x.txt"]) != nil })
        #expect(engine.unreachableReason(forOperationsTouching: ["/q"])?.contains("HTTP 500 (test)") == true)
        #expect(engine.unreachableReason(forOperationsTouching: ["/other"]) == nil)
        fixture.probe.failBefore { _, _ in nil }
        #expect(sync(engine).isEmpty)
        #expect(engine.unreachableReason(forOperationsTouching: ["/q/x.txt"]) == nil)
        #expect(fixture.memory.content("/q/x.txt") == nil)
    }

    @Test func onlyIndependentOperationsShareABatchAndOrderIsKept() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let x = fixture.memory.externalWrite("/a/x", bytes("x"))
        let y = fixture.memory.externalWrite("/b/y", bytes("y"))
        fixture.probe.closeGate("deleteBatch")
        let engine = try fixture.engine()
        defer { engine.shutdown(drainUntil: nil) }
        try engine.journalUnlink(path: "/a/x", rev: { x.rev }) { _ in }
        #expect(fixture.probe.waitUntilBlocked("deleteBatch"))
        // Queued behind the batch in flight: the folder depends on its file, /b/y on nothing.
        try engine.journalRmdir(path: "/a") { _ in }
        try engine.journalUnlink(path: "/b/y", rev: { y.rev }) { _ in }
        try engine.journalMkdir(path: "/a") { _ in }           // after the rmdir of the same path
        try engine.journalRename(from: "/b", to: "/c", folder: true, replacing: nil, revs: { (nil, nil) }) { _ in }
        fixture.probe.openGate("deleteBatch")
        #expect(sync(engine).isEmpty)
        let batches = fixture.probe.namespaceBatches.map { "\($0.operation): \($0.paths.joined(separator: ","))" }
        print("batches: \(batches)")
        #expect(batches == ["deleteBatch: /a/x", "deleteBatch: /a,/b/y", "createFolders: /a", "moveBatch: /b→/c"])
        #expect(fixture.memory.allPaths() == ["/a", "/c"])
    }

    @Test func anUploadUnderAMovedFolderWaitsForTheMove() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        fixture.memory.externalMkdir("/src")
        fixture.probe.closeGate("moveBatch")
        let engine = try fixture.engine()
        defer { engine.shutdown(drainUntil: nil) }
        try fixture.put(engine, "/src/f.txt", bytes("fresh"))
        try engine.journalRename(from: "/src", to: "/dst", folder: true, replacing: nil, revs: { (nil, nil) }) { _ in }
        #expect(fixture.probe.waitUntilBlocked("moveBatch"))
        Thread.sleep(forTimeInterval: 0.3)   // several gathering windows: nothing may be committed yet
        #expect(fixture.probe.landedCommits.isEmpty)
        #expect(engine.stagingFile(path: "/dst/f.txt") != nil && engine.stagingFile(path: "/src/f.txt") == nil)
        fixture.probe.openGate("moveBatch")
        #expect(sync(engine).isEmpty)
        #expect(fixture.memory.allPaths() == ["/dst", "/dst/f.txt"])
        #expect(fixture.memory.content("/dst/f.txt") == bytes("fresh"))
    }

    @Test func aFileMadeAgainAfterAnUnlinkIsAddedAfterTheDelete() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let old = fixture.memory.externalWrite("/f.txt", bytes("old"))
        fixture.probe.closeGate("deleteBatch")
        let engine = try fixture.engine()
        defer { engine.shutdown(drainUntil: nil) }
        try engine.journalUnlink(path: "/f.txt", rev: { old.rev }) { _ in }
        try fixture.put(engine, "/f.txt", bytes("new"))
        #expect(fixture.probe.waitUntilBlocked("deleteBatch"))
        Thread.sleep(forTimeInterval: 0.3)
        #expect(fixture.probe.landedCommits.isEmpty)
        fixture.probe.openGate("deleteBatch")
        #expect(sync(engine).isEmpty)
        #expect(fixture.memory.content("/f.txt") == bytes("new"))
        #expect(fixture.memory.allPaths() == ["/f.txt"])   // no conflicted copy
    }

    @Test func aFileChangedElsewhereIsNotDeletedAndSyncSaysSo() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let seen = fixture.memory.externalWrite("/shared.txt", bytes("v1"))
        fixture.memory.externalWrite("/shared.txt", bytes("v2 from elsewhere"))
        let engine = try fixture.engine()
        defer { engine.shutdown(drainUntil: nil) }
        try engine.journalUnlink(path: "/shared.txt", rev: { seen.rev }) { _ in }
        let left = sync(engine)
        print("sync: \(left.map { "\($0.operation ?? "?"): \($0.lastError ?? "")" })")
        #expect(left.map(\.operation) == ["unlink /shared.txt"] && left.first?.state == .failed)
        #expect(fixture.memory.content("/shared.txt") == bytes("v2 from elsewhere"))
        let settled = fixture.events.waitFor { if case .namespaceSettled = $0 { true } else { false } }
        #expect(settled == .namespaceSettled(sequence: left.first?.generation ?? 0, refresh: ["/shared.txt"], entry: nil))
        #expect(sync(engine).isEmpty)   // reported once
    }

    @Test func aFileWhoseCommitLandedUnheardIsDeletedByItsHash() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        // The upload reaches Dropbox, its reply is lost, and the retry is far off.
        fixture.probe.failAfter { operation, _ in operation == "upload" ? .other("test: reply lost") : nil }
        let engine = try fixture.engine { $0.retryBaseDelay = 30; $0.retryMaxDelay = 30 }
        defer { engine.shutdown(drainUntil: nil) }
        try fixture.put(engine, "/landed.txt", bytes("ours"))
        #expect(eventually { engine.status().uploads.first?.attempts == 1 })
        #expect(fixture.memory.content("/landed.txt") == bytes("ours"))
        fixture.probe.failAfter { _, _ in nil }
        try engine.journalUnlink(path: "/landed.txt", rev: { nil }) { _ in }
        #expect(sync(engine).isEmpty)
        #expect(fixture.memory.content("/landed.txt") == nil)
    }

    /// test_concurrent_model (seed 12) left a file on Dropbox that the mount had unlinked: its
    /// second version was written on a base taken before the first version's commit was heard
    /// (the facade's tree had no rev yet), so the unlink took the file for one Dropbox never had
    /// and journaled nothing. Our own commits at the path say otherwise.
    @Test func anUnlinkAfterOurCommitLandedDeletesItWhateverTheDirtyBaseSays() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        // A long gather window: the second version is still waiting to be sent at the unlink.
        let engine = try fixture.engine { $0.gatherDelay = 30; $0.maxGatherTime = 30 }
        defer { engine.shutdown(drainUntil: nil) }
        try fixture.put(engine, "/f.txt", bytes("first"))
        _ = engine.waitForAll(deadline: Date().addingTimeInterval(20), retryingHeld: true)
        #expect(fixture.memory.content("/f.txt") == bytes("first"))
        // The facade began the next version before it heard of that commit: base .newFile.
        try fixture.put(engine, "/f.txt", bytes("second"), base: .newFile)
        try engine.journalUnlink(path: "/f.txt", rev: { nil }) { _ in }
        #expect(sync(engine).isEmpty)
        #expect(fixture.memory.content("/f.txt") == nil, "the unlinked file is still on Dropbox")
    }

    /// A dirty version's base can predate commits of ours that landed since (a version closed
    /// while the previous one's commit was in flight keeps the base it began with; the commit
    /// rebases it when it goes). What an unlink or a rename journals must go by those commits,
    /// or a file Dropbox has is taken for one it never had and nothing is sent: the emulator
    /// kept a file the mount had replaced and unlinked (test_concurrent_model, seed 12).
    @Test func aDirtyVersionsStaleBaseDoesNotHideOurCommitsFromAnUnlink() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        fixture.probe.closeGate("upload")   // the dirty version stays pending
        let engine = try fixture.engine()
        defer { fixture.probe.openGate("upload"); engine.shutdown(drainUntil: nil) }
        try fixture.put(engine, "/f.txt", bytes("second"), base: .newFile)
        #expect(fixture.probe.waitUntilBlocked("upload"))
        engine.condition.lock()
        // As after the first version's commit landed as r1, then one of ours updated it to r2.
        engine.revisionsAfterCommit["/f.txt"] = [(from: .newFile, to: "r1"), (from: .revision("r1"), to: "r2")]
        let presence = engine.remotePresence("/f.txt", cleanRev: nil)
        engine.revisionsAfterCommit["/f.txt"] = [(from: .revision("r0"), to: "r2")]   // the chain's start forgotten
        let trimmed = engine.remotePresence("/f.txt", cleanRev: nil)
        engine.condition.unlock()
        #expect(presence.onDropbox && presence.parentRev == "r2")
        #expect(trimmed.onDropbox && trimmed.parentRev == "r2")
    }

    @Test func aLocalFileRenamedOntoAnotherIsOneUpdate() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let index = fixture.memory.externalWrite("/repo/index", bytes("old index"))
        let engine = try fixture.engine()
        defer { engine.shutdown(drainUntil: nil) }
        fixture.memory.resetCounts()
        // git: write index.lock, rename it over index.
        try fixture.put(engine, "/repo/index.lock", bytes("new index"))
        try engine.journalRename(from: "/repo/index.lock", to: "/repo/index", folder: false, replacing: .file,
                                 revs: { (nil, index.rev) }) { operations in #expect(operations.isEmpty) }
        #expect(sync(engine).isEmpty)
        #expect(fixture.memory.content("/repo/index") == bytes("new index"))
        #expect(fixture.memory.allPaths() == ["/repo", "/repo/index"])
        #expect(fixture.probe.namespaceBatches.isEmpty)
        #expect(try fixture.memory.metadata(path: "/repo/index")?.id == index.id)   // an update: the same file
    }

    @Test func offlineOperationsWaitAndGoOnceDropboxAnswers() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let failing = FailingRemote(fixture.probe)
        failing.setRule { _, _ in .unavailable("test: network down") }
        let engine = try fixture.engine(remote: failing)
        defer { engine.shutdown(drainUntil: nil) }
        // cp -r dir M/ while offline: folders and files.
        try engine.journalMkdir(path: "/copy") { _ in }
        try engine.journalMkdir(path: "/copy/sub") { _ in }
        try fixture.put(engine, "/copy/sub/file.txt", bytes("offline bytes"))
        let left = engine.waitForAll(deadline: Date().addingTimeInterval(0.5))
        #expect(Set(left.compactMap(\.operation)) == ["mkdir /copy", "mkdir /copy/sub"])
        #expect(left.contains { $0.path == "/copy/sub/file.txt" })
        #expect(engine.status().offline && engine.status().operations.count == 2)
        failing.setRule { _, _ in nil }
        #expect(sync(engine).isEmpty)
        #expect(fixture.memory.content("/copy/sub/file.txt") == bytes("offline bytes"))
        #expect(engine.status().operations.isEmpty && !engine.status().offline)
    }

    @Test(arguments: [0, 1, 2, 3, 4, 5])
    func aKillMidQueueLosesNothing(boundary: Int) throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let gone = fixture.memory.externalWrite("/q/gone.txt", bytes("gone"))
        fixture.memory.externalWrite("/q/moved/in.txt", bytes("in"))
        fixture.probe.freeze(afterBoundaries: boundary)
        let first = try fixture.engine()
        try first.journalMkdir(path: "/q/new") { _ in }
        try first.journalUnlink(path: "/q/gone.txt", rev: { gone.rev }) { _ in }
        try first.journalRename(from: "/q/moved", to: "/q/new/moved", folder: true, replacing: nil, revs: { (nil, nil) }) { _ in }
        try first.journalRmdir(path: "/q/new/moved/empty") { _ in }   // never existed: nothing to delete
        _ = eventually(timeout: 2) { fixture.probe.isFrozen || first.status().operations.isEmpty }
        first.stopAbruptly()

        let second = try fixture.engine(remote: fixture.memory)
        #expect(sync(second).isEmpty)
        second.shutdown(drainUntil: nil)
        fixture.probe.thaw()   // the dead engine's stuck call goes through: it must change nothing
        Thread.sleep(forTimeInterval: 0.05)
        #expect(fixture.memory.allPaths() == ["/q", "/q/new", "/q/new/moved", "/q/new/moved/in.txt"], "kill point \(boundary)")
        let rows = try SQLiteDatabase(path: fixture.directory.appendingPathComponent("journal.sqlite").path)
            .query("SELECT COUNT(*) AS n FROM namespace_ops").first?.int64("n")
        #expect(rows == 0)
    }

    @Test func recoveredOperationsWaitUntilReleased() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        fixture.probe.failBefore { operation, _ in operation == "createFolders" ? .unavailable("down") : nil }
        do {
            let first = try fixture.engine()
            try first.journalMkdir(path: "/later") { _ in }
            first.shutdown(drainUntil: Date().addingTimeInterval(0.2))
        }
        fixture.probe.failBefore { _, _ in nil }
        let second = try fixture.engine { $0.holdRecoveredNamespaceOperations = true }
        defer { second.shutdown(drainUntil: nil) }
        #expect(second.queuedNamespaceOperations().map(\.path) == ["/later"])
        Thread.sleep(forTimeInterval: 0.2)
        #expect(try fixture.memory.metadata(path: "/later") == nil)
        second.releaseRecoveredNamespaceOperations()
        #expect(sync(second).isEmpty)
        #expect(try fixture.memory.metadata(path: "/later")?.isFolder == true)
    }
}
