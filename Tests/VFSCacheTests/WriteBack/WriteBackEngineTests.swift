/// The write-back engine against the in-memory Dropbox: upload policies (single, batch, large
/// concurrent session), ordering (later write wins, stale jobs cancelled), fsync and sync waits.
import ContentHash
import Foundation
import Testing
@testable import VFSCache

@Suite(.serialized, .timeLimit(.minutes(2))) struct WriteBackEngineTests {
    @Test func loneSmallFileIsOneUploadCall() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        let generation = try fixture.put(engine, "/Docs/Note.txt", bytes("hello"))
        try engine.waitUntilCommitted(path: "/docs/note.txt", generation: generation, timeout: 10)
        #expect(fixture.memory.content("/docs/note.txt") == bytes("hello"))
        #expect(fixture.memory.calls("upload") == 1)
        #expect(fixture.memory.calls("finishBatch") == 0)
        #expect(fixture.memory.calls("startSession") == 0)
        let event = fixture.events.waitFor { if case .committed = $0 { true } else { false } }
        guard case .committed(let path, let committedGeneration, let entry)? = event else { Issue.record("no commit event"); return }
        #expect(path == "/Docs/Note.txt")
        #expect(committedGeneration == generation)
        #expect(entry.contentHash == DropboxContentHasher.hash(bytes("hello")))
        engine.deliverPendingEvents()   // the staging file goes once the event was handled
        #expect(eventually { fixture.stagingNames().isEmpty })   // once the commit events were handled
        #expect(try fixture.journalRows() == 0)
    }

    /// fsync and sync are waited for: their files go at once, not after the gather window (an
    /// fsync per SQLite transaction waited out 150 ms each). The window here is 30 s, so a wait
    /// that returns within 15 s did not wait for it.
    @Test func fsyncAndSyncDoNotWaitForTheGatherWindow() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let engine = try fixture.engine { $0.gatherDelay = 30; $0.maxGatherTime = 30 }
        defer { engine.shutdown(drainUntil: nil) }
        let started = Date()
        let generation = try fixture.put(engine, "/t.db-journal", bytes("journal"))
        try engine.waitUntilCommitted(path: "/t.db-journal", generation: generation, timeout: 60)
        #expect(Date().timeIntervalSince(started) < 15)
        #expect(fixture.memory.content("/t.db-journal") == bytes("journal"))
        // Two files closed, then sync: one batch, sent at once.
        try fixture.put(engine, "/a", bytes("a"))
        try fixture.put(engine, "/b", bytes("b"))
        let synced = Date()
        #expect(engine.waitForAll(deadline: Date().addingTimeInterval(60)).isEmpty)
        #expect(Date().timeIntervalSince(synced) < 15)
        #expect(fixture.memory.content("/a") == bytes("a") && fixture.memory.content("/b") == bytes("b"))
    }

    /// A file committed, its folder renamed, then written again by a facade that has not seen the
    /// commit yet (its base still "new file"): our own earlier commit follows the file to its new
    /// path, so the write updates that rev instead of conflicting with it (found by the
    /// model-checked mount test: "f (conflicted copy)" holding the latest bytes).
    @Test func ourOwnCommitsFollowAFolderRename() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        let first = try fixture.put(engine, "/a/d/f", bytes("one"))
        try engine.waitUntilCommitted(path: "/a/d/f", generation: first, timeout: 10)
        try engine.rename(from: "/a", to: "/b") { () throws(Errno) -> [String: WriteBase] in
            _ = try? fixture.memory.move(from: "/a", to: "/b")
            return [:]
        }
        let second = try fixture.put(engine, "/b/d/f", bytes("two"), base: .newFile)
        try engine.waitUntilCommitted(path: "/b/d/f", generation: second, timeout: 10)
        #expect(fixture.memory.content("/b/d/f") == bytes("two"))
        #expect(fixture.memory.allPaths() == ["/b", "/b/d", "/b/d/f"])
        #expect(engine.status().conflicts.isEmpty)
    }

    @Test func stagingFileServesReadsUntilCommitAndIsDeletedOnlyAfter() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        fixture.probe.closeGate("upload")
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        let generation = try fixture.put(engine, "/a.txt", bytes("pending bytes"))
        #expect(fixture.probe.waitUntilBlocked("upload"))
        // Read-your-writes while the upload is in flight, and the bytes are still on disk.
        #expect(try engine.stagingFile(path: "/A.TXT")?.read(at: 0, count: 100) == bytes("pending bytes"))
        #expect(fixture.stagingNames().count == 1)
        #expect(try fixture.journalRows() == 1)
        #expect(throws: WriteBackError.self) { try engine.waitUntilCommitted(path: "/a.txt", generation: generation, timeout: 0.05) }
        fixture.probe.openGate("upload")
        try engine.waitUntilCommitted(path: "/a.txt", generation: generation, timeout: 10)
        #expect(eventually { fixture.stagingNames().isEmpty })   // once the commit events were handled
        #expect(try fixture.journalRows() == 0)
    }

    @Test func wrongHashAfterCommitKeepsTheStagingFile() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        fixture.probe.setBogusHash(true)
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        try fixture.put(engine, "/x.bin", bytes("payload"))
        let left = engine.waitForAll(deadline: Date().addingTimeInterval(0.5))
        #expect(left.map(\.path) == ["/x.bin"])
        #expect(left.first?.lastError?.contains("content hash") == true)
        #expect(fixture.stagingNames().count == 1)
        #expect(try fixture.journalRows() == 1)
        fixture.probe.setBogusHash(false)
        // After repeated mismatches it is a hard failure, retried slowly: poll for the retry.
        #expect(eventually { engine.status().pendingFiles == 0 })
        #expect(eventually { fixture.stagingNames().isEmpty })   // once the commit events were handled
    }

    @Test func largeFileUsesAConcurrentSessionWithParallelAppends() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        fixture.probe.setAppendDelay(0.05)
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        let data = pseudoRandomBytes(22 << 20, seed: 7)   // 5 full 4 MiB chunks + 2 MiB
        let generation = try fixture.put(engine, "/big/video.mp4", data)
        try engine.waitUntilCommitted(path: "/big/video.mp4", generation: generation, timeout: 30)
        #expect(fixture.memory.content("/big/video.mp4") == data)
        #expect(fixture.memory.calls("startSession") == 1)
        #expect(fixture.memory.calls("appendSession") == 6)
        #expect(fixture.memory.calls("finishBatch") == 1)
        #expect(fixture.memory.calls("upload") == 0)
        #expect(fixture.probe.maxConcurrentAppends >= 2)
        #expect(fixture.probe.maxConcurrentAppends <= engine.configuration.chunksInFlight)
    }

    @Test func largeFileStreamsChunksWhileBeingWritten() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        let data = pseudoRandomBytes(21 << 20, seed: 12)
        try writeSequentially(engine, "/stream.bin", data)
        // Every full 4 MiB chunk is on Dropbox before close.
        #expect(eventually { fixture.memory.calls("appendSession") == 5 })
        #expect(fixture.memory.calls("finishBatch") == 0)
        let generation = try engine.close(path: "/stream.bin")
        try engine.waitUntilCommitted(path: "/stream.bin", generation: generation, timeout: 30)
        #expect(fixture.memory.content("/stream.bin") == data)
        #expect(fixture.memory.calls("startSession") == 1)
        #expect(fixture.memory.calls("appendSession") == 6)   // + the closing 1 MiB
    }

    @Test func streamedFileOfWholeChunksClosesWithAnEmptyAppend() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        let data = pseudoRandomBytes(12 << 20, seed: 13)
        try writeSequentially(engine, "/exact.bin", data)
        #expect(eventually { fixture.memory.calls("appendSession") == 3 })
        let generation = try engine.close(path: "/exact.bin")
        try engine.waitUntilCommitted(path: "/exact.bin", generation: generation, timeout: 30)
        #expect(fixture.memory.content("/exact.bin") == data)
        #expect(fixture.memory.calls("appendSession") == 4)
    }

    @Test func rewriteBelowTheStreamedPrefixAbandonsTheSession() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        var data = pseudoRandomBytes(16 << 20, seed: 14)
        try writeSequentially(engine, "/edited.bin", data)
        #expect(eventually { fixture.memory.calls("appendSession") == 4 })
        // The application seeks back and patches the start of the file.
        engine.noteRewrite(path: "/edited.bin")
        try engine.stagingFile(path: "/edited.bin")!.write(at: 10, bytes("PATCHED"))
        data.replaceSubrange(10..<17, with: bytes("PATCHED"))
        let generation = try engine.close(path: "/edited.bin")
        try engine.waitUntilCommitted(path: "/edited.bin", generation: generation, timeout: 30)
        #expect(fixture.memory.content("/edited.bin") == data)
        #expect(fixture.memory.calls("startSession") == 2)
    }

    @Test func missedRewriteIsCaughtByTheContentHash() throws {
        // If the facade forgot noteRewrite, Dropbox would commit the session's stale bytes (it
        // checks no whole-file hash at finish; the in-memory remote neither, since this test
        // passed only because it did). The staging file saw the write land below what the stream
        // had read, so the session is dropped at close: one commit, with the bytes at close.
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        var data = pseudoRandomBytes(12 << 20, seed: 15)
        try writeSequentially(engine, "/sneaky.bin", data)
        #expect(eventually { fixture.memory.calls("appendSession") == 3 })
        try engine.stagingFile(path: "/sneaky.bin")!.write(at: 5, bytes("X"))
        data[5] = UInt8(ascii: "X")
        let generation = try engine.close(path: "/sneaky.bin")
        try engine.waitUntilCommitted(path: "/sneaky.bin", generation: generation, timeout: 30)
        #expect(fixture.memory.content("/sneaky.bin") == data)
        #expect(fixture.probe.landedCommits == ["/sneaky.bin"])
    }

    @Test func burstOfAThousandSmallFilesCostsFewCommitCalls() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        // A loaded machine stretches the burst: let only the idle gap close the window.
        let engine = try fixture.engine { $0.gatherDelay = 0.2; $0.maxGatherTime = 30 }; defer { engine.shutdown(drainUntil: nil) }
        for index in 0..<1000 {
            try fixture.put(engine, "/tree/dir\(index % 10)/file\(index).txt", bytes("content of file \(index)\n"))
        }
        #expect(engine.waitForAll(deadline: Date().addingTimeInterval(60)).isEmpty)
        let commitCalls = fixture.memory.calls("finishBatch") + fixture.memory.calls("upload")
        #expect(commitCalls <= 10, "\(commitCalls) commit calls")
        for index in stride(from: 0, to: 1000, by: 1) {
            #expect(fixture.memory.content("/tree/dir\(index % 10)/file\(index).txt") == bytes("content of file \(index)\n"))
        }
        #expect(eventually { fixture.stagingNames().isEmpty })   // once the commit events were handled
    }

    @Test func eightConcurrentWritersAllArrive() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        let failures = EventLog()
        let threads = (0..<8).map { writer in
            Thread {
                do {
                    for index in 0..<60 {
                        try fixture.put(engine, "/w\(writer)/f\(index)", bytes("writer \(writer) file \(index)"))
                    }
                    try fixture.put(engine, "/w\(writer)/large", pseudoRandomBytes(9 << 20, seed: UInt64(writer)))
                } catch {
                    failures.append(.failed(path: "writer \(writer)", generation: 0, error: .other("\(error)"), willRetry: false))
                }
            }
        }
        threads.forEach { $0.start() }
        #expect(eventually(timeout: 30) { engine.status().pendingFiles + threads.filter { !$0.isFinished }.count == 0 || threads.allSatisfy(\.isFinished) })
        #expect(engine.waitForAll(deadline: Date().addingTimeInterval(60)).isEmpty)
        #expect(failures.all.isEmpty)
        for writer in 0..<8 {
            for index in 0..<60 { #expect(fixture.memory.content("/w\(writer)/f\(index)") == bytes("writer \(writer) file \(index)")) }
            #expect(fixture.memory.content("/w\(writer)/large") == pseudoRandomBytes(9 << 20, seed: UInt64(writer)))
        }
        #expect(eventually { fixture.stagingNames().isEmpty })   // once the commit events were handled
    }

    @Test func laterWriteToTheSamePathWins() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        for round in 0..<20 {
            try fixture.put(engine, "/notes.md", bytes("version \(round)"))
            if round % 3 == 0 { Thread.sleep(forTimeInterval: 0.01) }
        }
        #expect(engine.waitForAll(deadline: Date().addingTimeInterval(20)).isEmpty)
        #expect(fixture.memory.content("/notes.md") == bytes("version 19"))
        #expect(fixture.memory.allPaths() == ["/notes.md"])
    }

    @Test func newerWriteCancelsTheUploadInFlight() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        fixture.probe.closeGate("appendSession")
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        let old = pseudoRandomBytes(12 << 20, seed: 1)
        try fixture.put(engine, "/data.bin", old)
        #expect(fixture.probe.waitUntilBlocked("appendSession"))
        let new = pseudoRandomBytes(12 << 20, seed: 2)
        let generation = try fixture.put(engine, "/data.bin", new)
        fixture.probe.openGate("appendSession")
        try engine.waitUntilCommitted(path: "/data.bin", generation: generation, timeout: 30)
        #expect(fixture.memory.content("/data.bin") == new)
        #expect(fixture.probe.landedCommits == ["/data.bin"], "the stale version must never land")
    }

    @Test func deleteCancelsTheUploadAndNothingLands() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        fixture.probe.closeGate("appendSession")
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        try fixture.put(engine, "/gone.bin", pseudoRandomBytes(9 << 20, seed: 3))
        #expect(fixture.probe.waitUntilBlocked("appendSession"))
        let released = Thread { Thread.sleep(forTimeInterval: 0.05); fixture.probe.openGate("appendSession") }
        released.start()
        var remoteDeleteCalled = false
        try engine.remove(path: "/gone.bin") { remoteDeleteCalled = true }
        #expect(remoteDeleteCalled)
        #expect(engine.waitForAll(deadline: Date().addingTimeInterval(1)).isEmpty)
        Thread.sleep(forTimeInterval: 0.1)
        #expect(fixture.memory.content("/gone.bin") == nil)
        #expect(fixture.probe.landedCommits.isEmpty)
        #expect(eventually { fixture.stagingNames().isEmpty })   // once the commit events were handled
        #expect(try fixture.journalRows() == 0)
    }

    @Test func renameMovesThePendingUploadAndTheOldPathNeverLands() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        fixture.probe.closeGate("upload")
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        // The upload is caught before it reaches Dropbox, then fails as if offline; the rename
        // happens while it waits to be retried.
        try fixture.put(engine, "/tmp/.file.swp", bytes("draft"))
        #expect(fixture.probe.waitUntilBlocked("upload"))
        fixture.probe.failBefore { operation, _ in operation == "upload" ? .unavailable("test: offline") : nil }
        fixture.probe.openGate("upload")
        try engine.rename(from: "/tmp/.file.swp", to: "/docs/file.txt") { [:] }
        fixture.probe.failBefore { _, _ in nil }
        #expect(engine.waitForAll(deadline: Date().addingTimeInterval(10)).isEmpty)
        #expect(fixture.memory.content("/docs/file.txt") == bytes("draft"))
        #expect(fixture.memory.content("/tmp/.file.swp") == nil)
        #expect(!fixture.probe.landedCommits.contains("/tmp/.file.swp"))
    }

    @Test func renameOverADirtyFileReplacesIt() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        fixture.probe.closeGate("upload")
        fixture.probe.closeGate("startSession")
        let engine = try fixture.engine { $0.gatherDelay = 0.5 }; defer { engine.shutdown(drainUntil: nil) }
        try fixture.put(engine, "/f.txt", bytes("old"))
        try fixture.put(engine, "/f.txt.tmp", bytes("new"))
        #expect(fixture.probe.waitUntilBlocked("startSession", count: 2))
        let released = Thread {
            Thread.sleep(forTimeInterval: 0.05)
            fixture.probe.openGate("upload")
            fixture.probe.openGate("startSession")
        }
        released.start()
        try engine.rename(from: "/f.txt.tmp", to: "/f.txt") { [:] }
        #expect(engine.waitForAll(deadline: Date().addingTimeInterval(10)).isEmpty)
        #expect(fixture.memory.content("/f.txt") == bytes("new"))
        #expect(fixture.memory.allPaths() == ["/f.txt"])
    }

    @Test func failedRemoteRemoveOrRenameLeavesEverythingAsItWas() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        fixture.probe.failBefore { _, _ in .unavailable("test: offline") }
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        try fixture.put(engine, "/keep/a.txt", bytes("A"))
        #expect(throws: Errno.io) { try engine.remove(path: "/keep/a.txt") { () throws(Errno) in throw Errno.io } }
        #expect(throws: Errno.exists) { try engine.rename(from: "/keep", to: "/moved") { () throws(Errno) -> [String: WriteBase] in throw Errno.exists } }
        #expect(try fixture.journalRows() == 1)
        #expect(engine.status().uploads.map(\.path) == ["/keep/a.txt"])
        fixture.probe.failBefore { _, _ in nil }
        #expect(eventually { engine.status().pendingFiles == 0 })
        #expect(fixture.memory.content("/keep/a.txt") == bytes("A"))
        #expect(fixture.memory.content("/moved/a.txt") == nil)
    }

    @Test func folderRenameMovesEveryDirtyFileUnderIt() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        fixture.probe.failBefore { _, _ in .unavailable("test: offline") }
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        try fixture.put(engine, "/Src/one.c", bytes("1"))
        try fixture.put(engine, "/Src/lib/two.c", bytes("2"))
        try fixture.put(engine, "/Srcfile", bytes("not under /Src"))
        try engine.rename(from: "/Src", to: "/Dst") { [:] }
        fixture.probe.failBefore { _, _ in nil }
        #expect(eventually { engine.status().pendingFiles == 0 })
        #expect(fixture.memory.content("/dst/one.c") == bytes("1"))
        #expect(fixture.memory.content("/dst/lib/two.c") == bytes("2"))
        #expect(fixture.memory.content("/srcfile") == bytes("not under /Src"))
        #expect(fixture.memory.content("/src/one.c") == nil)
    }

    @Test func statusShowsPendingFilesAndProgress() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        fixture.probe.closeGate("finishBatch")
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        #expect(engine.status().oldestPendingSince == nil)
        let data = pseudoRandomBytes(10 << 20, seed: 9)
        let beforeClose = Date()
        try fixture.put(engine, "/iso/disk.img", data)
        #expect(fixture.probe.waitUntilBlocked("finishBatch"))
        let status = engine.status()
        // The metrics' oldest pending age counts from the close.
        let since = try #require(status.oldestPendingSince)
        #expect(since >= beforeClose && since <= Date())
        #expect(status.pendingFiles == 1)
        #expect(status.pendingBytes == UInt64(data.count))
        #expect(status.uploads.first?.state == .committing)
        #expect(status.transfers.first?.bytesDone == UInt64(data.count))
        #expect(status.transfers.first?.bytesTotal == UInt64(data.count))
        fixture.probe.openGate("finishBatch")
        #expect(engine.waitForAll(deadline: Date().addingTimeInterval(10)).isEmpty)
        #expect(engine.status().pendingFiles == 0)
        #expect(engine.status().oldestPendingSince == nil)
    }

    @Test func commitEventTranslatesAStaleBaseOfTheFacade() throws {
        // The facade reopens a file before it processed the commit event of the previous save: its
        // base is still the old rev, which must not turn into a conflict with our own commit.
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let original = fixture.memory.externalWrite("/report.txt", bytes("v0"))
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        let first = try fixture.put(engine, "/report.txt", bytes("v1"), base: .revision(original.rev!))
        try engine.waitUntilCommitted(path: "/report.txt", generation: first, timeout: 10)
        let second = try fixture.put(engine, "/report.txt", bytes("v2"), base: .revision(original.rev!))
        try engine.waitUntilCommitted(path: "/report.txt", generation: second, timeout: 10)
        #expect(fixture.memory.content("/report.txt") == bytes("v2"))
        #expect(fixture.memory.allPaths() == ["/report.txt"])
    }

}
