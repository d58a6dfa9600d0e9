/// Conflicts, retries and failures: keep both versions on a conflict, never a spurious conflicted
/// copy after a lost reply, insufficient space kept journaled and reported, offline retried.
import ContentHash
import Foundation
import Synchronization
import Testing
@testable import VFSCache

@Suite(.serialized, .timeLimit(.minutes(2))) struct WriteBackFailureTests {
    @Test func conflictKeepsBothVersionsAsAConflictedCopy() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let opened = fixture.memory.externalWrite("/Reports/Q3 plan.txt", bytes("base"))
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        let file = try engine.beginWrite(path: "/Reports/Q3 plan.txt", base: .revision(opened.rev!))
        fixture.memory.externalWrite("/Reports/Q3 plan.txt", bytes("theirs"))   // another device, meanwhile
        try file.write(at: 0, bytes("ours!"))
        let generation = try engine.close(path: "/Reports/Q3 plan.txt")
        try engine.waitUntilCommitted(path: "/Reports/Q3 plan.txt", generation: generation, timeout: 10)
        let copy = "/Reports/Q3 plan (conflicted copy 2026-11-29).txt"
        #expect(fixture.memory.content("/Reports/Q3 plan.txt") == bytes("theirs"))
        #expect(fixture.memory.content(copy) == bytes("ours!"))
        let event = fixture.events.waitFor { if case .conflicted = $0 { true } else { false } }
        #expect(event.map { if case .conflicted(let path, let copyPath, _, _) = $0 { path + "|" + copyPath } else { "" } }
                == "/Reports/Q3 plan.txt|" + copy)
        #expect(engine.status().conflicts.map(\.copyPath) == [copy])
        #expect(eventually { fixture.stagingNames().isEmpty })   // once the commit events were handled
    }

    /// Newer bytes written while our commit turns out to conflict (a writer that opened before the
    /// conflict was shown) continue our version, not theirs: they must not be committed over
    /// theirs. They were: the commit of the conflicted copy gave them the copy's rev as their
    /// base, and the next commit of the path replaced the other client's version without a word
    /// (test_no_silent_overwrite.py met it).
    @Test func bytesWrittenWhileOurCommitConflictsNeverReplaceTheOtherVersion() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let opened = fixture.memory.externalWrite("/n.txt", bytes("base"))
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        let file = try engine.beginWrite(path: "/n.txt", base: .revision(opened.rev!))
        try file.write(at: 0, bytes("ours 1"))
        fixture.memory.externalWrite("/n.txt", bytes("theirs"))   // another device, meanwhile
        // The commit of our bytes as the conflicted copy is made, and its reply held until the
        // writer below has begun.
        let reached = DispatchSemaphore(value: 0)
        let proceed = DispatchSemaphore(value: 0)
        let armed = Atomic<Bool>(true)
        fixture.probe.failAfter { operation, key in
            if ["upload", "finishBatch"].contains(operation), key.contains("conflicted copy"),
               armed.exchange(false, ordering: .relaxed) {
                reached.signal()
                _ = proceed.wait(timeout: .now() + 20)
            }
            return nil
        }
        _ = try engine.close(path: "/n.txt", staging: file)
        #expect(reached.wait(timeout: .now() + 10) == .success)
        // A writer opens on our version while the copy's reply is on its way.
        #expect(try engine.beginWrite(path: "/n.txt", base: .revision(opened.rev!)) === file)
        try file.truncate(to: 0)
        try file.write(at: 0, bytes("ours 2"))
        proceed.signal()
        #expect(eventually { fixture.memory.allPaths().contains { $0.contains("conflicted copy") } })
        let generation = try engine.close(path: "/n.txt", staging: file)
        _ = try? engine.waitUntilCommitted(path: "/n.txt", staging: file, generation: generation, timeout: 10)
        #expect(engine.waitForAll(deadline: Date().addingTimeInterval(10)).isEmpty)
        #expect(fixture.memory.content("/n.txt") == bytes("theirs"))
        let copies = fixture.memory.allPaths().filter { $0.contains("conflicted copy") }
        #expect(copies.contains { fixture.memory.content($0) == bytes("ours 2") }, "copies: \(copies)")
    }

    @Test func conflictedCopyNameGetsACounterWhenTaken() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        fixture.memory.externalWrite("/a.tar.gz", bytes("theirs"))
        fixture.memory.externalWrite("/a.tar (conflicted copy 2026-11-29).gz", bytes("an older copy"))
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        let generation = try fixture.put(engine, "/a.tar.gz", bytes("ours"), base: .newFile)
        try engine.waitUntilCommitted(path: "/a.tar.gz", generation: generation, timeout: 10)
        #expect(fixture.memory.content("/a.tar.gz") == bytes("theirs"))
        #expect(fixture.memory.content("/a.tar (conflicted copy 2026-11-29).gz") == bytes("an older copy"))
        #expect(fixture.memory.content("/a.tar (conflicted copy 2026-11-29) (1).gz") == bytes("ours"))
    }

    @Test func conflictNamesFollowTheDropboxClient() {
        let date = Date(timeIntervalSince1970: 1_795_953_600)
        let utc = TimeZone(identifier: "UTC")!
        #expect(ConflictNaming.copyPath(for: "/a/b.txt", date: date, timeZone: utc, index: 0) == "/a/b (conflicted copy 2026-11-29).txt")
        #expect(ConflictNaming.copyPath(for: "/.bashrc", date: date, timeZone: utc, index: 0) == "/.bashrc (conflicted copy 2026-11-29)")
        #expect(ConflictNaming.copyPath(for: "/Makefile", date: date, timeZone: utc, index: 2) == "/Makefile (conflicted copy 2026-11-29) (2)")
        #expect(ConflictNaming.copyPath(for: "/x/y.z/w", date: date, timeZone: utc, index: 0) == "/x/y.z/w (conflicted copy 2026-11-29)")
    }

    @Test func lostReplyIsRetriedWithoutAConflictedCopy() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let original = fixture.memory.externalWrite("/ledger.csv", bytes("1,2,3"))
        // The first upload lands on Dropbox but its reply is lost (a 5xx after the commit).
        let lost = LostReplies(times: 1, error: .unavailable("test: connection reset"))
        fixture.probe.failAfter { operation, _ in operation == "upload" ? lost.next() : nil }
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        let generation = try fixture.put(engine, "/ledger.csv", bytes("1,2,3,4"), base: .revision(original.rev!))
        try engine.waitUntilCommitted(path: "/ledger.csv", generation: generation, timeout: 10)
        #expect(fixture.memory.content("/ledger.csv") == bytes("1,2,3,4"))
        #expect(fixture.memory.allPaths() == ["/ledger.csv"])
        // The retry first asks whether the unheard commit landed (it did): no second upload.
        #expect(fixture.memory.calls("upload") == 1)
    }

    @Test func conflictAnswerForOurOwnLandedCommitIsNotAConflict() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        fixture.memory.externalMkdir("/w")
        // Our commit lands, but the reply says conflict (e.g. a retried request seeing its own
        // first attempt): the remote's hash equals ours, so it is ours.
        let lost = LostReplies(times: 1, error: .conflict("path/conflict/file"))
        fixture.probe.failAfter { operation, _ in operation == "upload" ? lost.next() : nil }
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        let generation = try fixture.put(engine, "/w/new.txt", bytes("fresh"))
        try engine.waitUntilCommitted(path: "/w/new.txt", generation: generation, timeout: 10)
        #expect(fixture.memory.allPaths() == ["/w", "/w/new.txt"])
        #expect(engine.status().conflicts.isEmpty)
    }

    @Test func transientFailuresAreRetriedWithoutDuplicates() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let failures = LostReplies(times: 6, error: .rateLimited(retryAfter: 0.01))
        let outage = LostReplies(times: 4, error: .unavailable("test: 503"))
        fixture.probe.failBefore { operation, _ in
            switch operation {
            case "finishBatch", "upload": return failures.next() ?? outage.next()
            case "appendSession": return outage.next()
            default: return nil
            }
        }
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        for index in 0..<30 { try fixture.put(engine, "/batch/\(index).txt", bytes("#\(index)")) }
        let big = pseudoRandomBytes(9 << 20, seed: 4)
        try fixture.put(engine, "/batch/big.bin", big)
        #expect(engine.waitForAll(deadline: Date().addingTimeInterval(20)).isEmpty)
        for index in 0..<30 { #expect(fixture.memory.content("/batch/\(index).txt") == bytes("#\(index)")) }
        #expect(fixture.memory.content("/batch/big.bin") == big)
        #expect(fixture.memory.allPaths().count == 32)   // the folder and 31 files: no copies
        #expect(engine.status().recentErrors.count >= 1)
    }

    @Test func insufficientSpaceStaysJournaledAndIsReported() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        fixture.probe.failBefore { operation, _ in operation == "upload" ? .insufficientSpace : nil }
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        let generation = try fixture.put(engine, "/full.txt", bytes("no room"))
        #expect(throws: WriteBackError.failed(.insufficientSpace)) {
            try engine.waitUntilCommitted(path: "/full.txt", generation: generation, timeout: 10)
        }
        #expect(WriteBackError.failed(.insufficientSpace).errno == .noSpace)
        let left = engine.waitForAll(deadline: Date().addingTimeInterval(10))
        #expect(left.map(\.path) == ["/full.txt"])
        #expect(left.first?.state == .failed)
        #expect(left.first?.lastError == "\(RemoteError.insufficientSpace)")
        #expect(engine.status().recentErrors.first?.path == "/full.txt")
        #expect(fixture.stagingNames().count == 1)
        #expect(try fixture.journalRows() == 1)
        // Space freed: the slow retry uploads it.
        fixture.probe.failBefore { _, _ in nil }
        #expect(eventually { engine.status().pendingFiles == 0 })
        #expect(fixture.memory.content("/full.txt") == bytes("no room"))
    }

    /// flush reports an earlier failure of the file it closes: the facade reads the file's path,
    /// then asks the engine, and a rename from another thread may move the file in between. By
    /// path, the engine found nothing there and the close reported success.
    @Test func aFailureIsReportedForAFileRenamedSinceItsPathWasRead() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        fixture.probe.failBefore { operation, _ in operation == "upload" ? .insufficientSpace : nil }
        let engine = try fixture.engine { $0.hardFailureRetryDelay = 600 }; defer { engine.shutdown(drainUntil: nil) }
        let file = try engine.beginWrite(path: "/full.txt", base: .newFile)
        try file.write(at: 0, bytes("no room"))
        let generation = try engine.close(path: "/full.txt", staging: file)
        #expect(throws: WriteBackError.failed(.insufficientSpace)) {
            try engine.waitUntilCommitted(path: "/full.txt", staging: file, generation: generation, timeout: 10)
        }
        try engine.rename(from: "/full.txt", to: "/moved.txt") { () throws(Errno) -> [String: WriteBase] in [:] }
        // A rename makes a held file due at once: its retry fails again (Dropbox is still full);
        // in between, no failure is on record.
        #expect(eventually { engine.failure(path: "/moved.txt") == .noSpace })
        #expect(eventually { engine.failure(path: "/full.txt", staging: file) == .noSpace })
        #expect(engine.failure(path: "/full.txt") == nil)   // no file of that name any more
    }

    /// fsync journals a held close (one the journal could not take) of the file its descriptor
    /// writes, wherever a rename from another thread moved it since the facade read its path. By
    /// path, fsync found no held close there and reported success with the bytes unjournaled.
    @Test func fsyncJournalsAHeldCloseOfAFileRenamedSinceItsPathWasRead() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let engine = try fixture.engine { $0.hardFailureRetryDelay = 600 }; defer { engine.shutdown(drainUntil: nil) }
        let file = try engine.beginWrite(path: "/held.txt", base: .newFile)
        try file.write(at: 0, bytes("kept"))
        // The journal refuses writes, as SQLite does on a full cache disk: the close is held.
        try engine.journal.database.execute("PRAGMA query_only = 1")
        #expect(throws: Errno.self) { try engine.close(path: "/held.txt", staging: file) }
        try engine.rename(from: "/held.txt", to: "/moved.txt") { () throws(Errno) -> [String: WriteBase] in [:] }
        // The rename makes the held close due at once; that retry fails too (the journal still
        // refuses) and sets the next one far off. Only then may the journal take writes again.
        #expect(eventually {
            engine.condition.lock(); defer { engine.condition.unlock() }
            let next = engine.files["/moved.txt"]?.notBefore ?? .distantPast
            return next > Date().addingTimeInterval(60) && next < .distantFuture
        })
        try engine.journal.database.execute("PRAGMA query_only = 0")
        let generation = try #require(try engine.retryClose(path: "/held.txt", staging: file))
        try engine.waitUntilCommitted(path: "/moved.txt", staging: file, generation: generation, timeout: 10)
        #expect(fixture.memory.content("/moved.txt") == bytes("kept"))
        #expect(fixture.memory.content("/held.txt") == nil)
    }

    /// Dropbox's no_write_permission (a read-only shared folder) is not a failure time fixes:
    /// the file is kept and reported as refused, and not retried until it is moved (issue 13).
    @Test func noWritePermissionIsRefusedKeptAndNotRetried() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let refusal = RemoteError.permissionDenied("/ro/doc.txt: no write permission")
        fixture.probe.failBefore { operation, _ in operation == "upload" ? refusal : nil }
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        let generation = try fixture.put(engine, "/ro/doc.txt", bytes("my work"))
        #expect(throws: WriteBackError.failed(refusal)) {
            try engine.waitUntilCommitted(path: "/ro/doc.txt", generation: generation, timeout: 10)
        }
        #expect(WriteBackError.failed(refusal).errno == .accessDenied)
        let left = engine.waitForAll(deadline: Date().addingTimeInterval(10))
        #expect(left.map(\.path) == ["/ro/doc.txt"] && left.first?.state == .refused)
        // Several hard-failure retry delays (0.3 s here) later it has still not been tried again,
        // although Dropbox would take it now.
        fixture.probe.failBefore { _, _ in nil }
        Thread.sleep(forTimeInterval: 1.2)
        #expect(fixture.memory.calls("upload") == 0 && engine.status().pendingFiles == 1)
        #expect(try fixture.journalRows() == 1 && fixture.stagingNames().count == 1)
        // Moved to a writable folder, it uploads.
        try engine.rename(from: "/ro/doc.txt", to: "/mine/doc.txt") { () throws(Errno) -> [String: WriteBase] in [:] }
        #expect(eventually { engine.status().pendingFiles == 0 })
        #expect(fixture.memory.content("/mine/doc.txt") == bytes("my work"))
    }

    /// Dropbox conflicts an update(rev) whose file was deleted (strict_conflict); the edit wins
    /// over the delete: the file comes back under its own name, and no conflicted copy is made.
    @Test func anEditOfAFileDeletedElsewhereRecreatesIt() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let opened = fixture.memory.externalWrite("/notes/e.txt", bytes("v1"))
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        let file = try engine.beginWrite(path: "/notes/e.txt", base: .revision(opened.rev!))
        fixture.memory.externalDelete("/notes/e.txt")   // another device, meanwhile
        try file.write(at: 0, bytes("v2 edited"))
        let generation = try engine.close(path: "/notes/e.txt")
        try engine.waitUntilCommitted(path: "/notes/e.txt", generation: generation, timeout: 10)
        #expect(fixture.memory.content("/notes/e.txt") == bytes("v2 edited"))
        #expect(fixture.memory.allPaths() == ["/notes", "/notes/e.txt"])
        #expect(engine.status().conflicts.isEmpty)
    }

    /// `dbxfs sync` after space was freed: the held file is tried again at once, not after the
    /// hard-failure delay (60 s by default), and sync waits for that attempt.
    @Test func syncRetriesAHeldUploadAtOnce() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        fixture.probe.failBefore { operation, _ in operation == "upload" ? .insufficientSpace : nil }
        let engine = try fixture.engine { $0.hardFailureRetryDelay = 600 }; defer { engine.shutdown(drainUntil: nil) }
        try fixture.put(engine, "/held.txt", bytes("later"))
        #expect(engine.waitForAll(deadline: Date().addingTimeInterval(10)).map(\.state) == [.failed])
        // Still no room: a retrying sync makes one more attempt, and reports it failed.
        let uploads = fixture.memory.calls("upload")
        #expect(engine.waitForAll(deadline: Date().addingTimeInterval(10), retryingHeld: true).map(\.state) == [.failed])
        fixture.probe.failBefore { _, _ in nil }
        let started = Date()
        #expect(engine.waitForAll(deadline: Date().addingTimeInterval(10), retryingHeld: true).isEmpty)
        #expect(Date().timeIntervalSince(started) < 10)
        #expect(fixture.memory.content("/held.txt") == bytes("later"))
        #expect(fixture.memory.calls("upload") == uploads + 1)
    }

    @Test func offlineUploadsWaitAndResume() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        fixture.probe.failBefore { _, _ in .unavailable("test: no route to host") }
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        let generation = try fixture.put(engine, "/offline.txt", bytes("later"))
        #expect(throws: WriteBackError.self) { try engine.waitUntilCommitted(path: "/offline.txt", generation: generation, timeout: 0.3) }
        #expect(engine.status().offline)
        #expect(engine.status().pendingFiles == 1)
        fixture.probe.failBefore { _, _ in nil }
        try engine.waitUntilCommitted(path: "/offline.txt", generation: generation, timeout: 10)
        #expect(!engine.status().offline)
        #expect(fixture.memory.content("/offline.txt") == bytes("later"))
    }
}

/// Hands out `error` a fixed number of times, then nil.
final class LostReplies: Sendable {
    private let remaining: Mutex<Int>
    private let error: RemoteError
    init(times: Int, error: RemoteError) { remaining = Mutex(times); self.error = error }
    func next() -> RemoteError? {
        remaining.withLock { count in
            guard count > 0 else { return nil }
            count -= 1
            return error
        }
    }
}
