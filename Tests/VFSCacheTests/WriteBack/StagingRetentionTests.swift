/// Staging files the kernel serves by itself (FUSE passthrough writes, StagingRetention.swift): a
/// commit that lands while such an open is left keeps the staging file (the kernel requires every
/// later open of the inode to use the same file), a new write reuses it, and the last release lets
/// it go and announces the commit again.
import ContentHash
import Foundation
import Testing
@testable import VFSCache

@Suite(.serialized, .timeLimit(.minutes(2))) struct StagingRetentionTests {
    private func commits(_ fixture: WriteBackFixture, _ path: String) -> Int {
        fixture.events.all.filter { if case .committed(let p, _, _) = $0 { p == path } else { false } }.count
    }

    @Test func aCommitKeepsAStagingFileTheKernelStillServesUntilItsLastOpenEnds() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        let file = try engine.beginWrite(path: "/p.bin", base: .newFile)
        #expect(engine.retainStaging(path: "/p.bin", file: file))
        #expect(engine.retainStaging(path: "/p.bin", file: file))   // a reader joined
        try file.write(at: 0, bytes("first"))
        let generation = try engine.close(path: "/p.bin")
        try engine.waitUntilCommitted(path: "/p.bin", generation: generation, timeout: 10)
        #expect(fixture.memory.content("/p.bin") == bytes("first"))
        // On Dropbox, no row, but the file stays: the kernel still writes and reads it.
        #expect(try fixture.journalRows() == 0)
        #expect(fixture.stagingNames() == [file.name])
        #expect(engine.stagingFile(path: "/P.BIN") === file)
        #expect(engine.status().pendingFiles == 0)
        #expect(engine.waitForAll(deadline: Date().addingTimeInterval(5)).isEmpty)

        // A new write of the path (the kernel wrote more meanwhile) goes to the same file.
        #expect(try engine.beginWrite(path: "/p.bin", base: .newFile) === file)
        try file.write(at: 5, bytes(" second"))
        let next = try engine.close(path: "/p.bin")
        try engine.waitUntilCommitted(path: "/p.bin", generation: next, timeout: 10)
        #expect(fixture.memory.content("/p.bin") == bytes("first second"))
        #expect(engine.status().conflicts.isEmpty)
        #expect(fixture.stagingNames() == [file.name])

        engine.deliverPendingEvents()   // the facade has shown the commit: only the opens keep it
        engine.releaseStaging(file)
        #expect(fixture.stagingNames() == [file.name])   // one open left
        let announced = commits(fixture, "/p.bin")
        engine.releaseStaging(file)
        #expect(fixture.stagingNames().isEmpty)
        #expect(engine.stagingFile(path: "/p.bin") == nil)
        // The commit is announced again, now that the file has no local bytes left.
        #expect(eventually { commits(fixture, "/p.bin") == announced + 1 })
    }

    /// The engine learns of its commit before the facade's tree shows it: until the commit event
    /// has been handled, the staging file stays the path's, and a new write there writes on from
    /// the committed bytes (the clean-clone CI run of 891f833 saw an append in that window fill a
    /// new staging file from the rev before the commit, and fail).
    @Test func aCommittedStagingFileStaysThePathsUntilTheCommitEventWasHandled() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        let gate = DispatchSemaphore(value: 0)
        engine.eventQueue.async { gate.wait() }   // the facade is busy: events wait
        var released = false
        defer { if !released { gate.signal() } }
        let file = try engine.beginWrite(path: "/w.txt", base: .newFile)
        try file.write(at: 0, bytes("committed"))
        let generation = try engine.close(path: "/w.txt")
        try engine.waitUntilCommitted(path: "/w.txt", generation: generation, timeout: 10)
        #expect(fixture.memory.content("/w.txt") == bytes("committed"))
        #expect(engine.stagingFile(path: "/w.txt") === file)
        #expect(!engine.keepsLocalBytes(path: "/w.txt", showing: generation))
        #expect(engine.keepsLocalBytes(path: "/w.txt", showing: generation - 1), "an earlier commit than the one held")
        // An append now: the same file, holding the committed bytes, based on the commit's rev.
        let again = try engine.beginWrite(path: "/w.txt", base: .newFile)
        #expect(again === file)
        try again.write(at: UInt64(try again.size()), bytes(" and more"))
        let next = try engine.close(path: "/w.txt")
        gate.signal(); released = true
        try engine.waitUntilCommitted(path: "/w.txt", generation: next, timeout: 10)
        #expect(fixture.memory.content("/w.txt") == bytes("committed and more"))
        #expect(engine.status().conflicts.isEmpty)
        engine.deliverPendingEvents()
        #expect(engine.stagingFile(path: "/w.txt") == nil)
        #expect(fixture.stagingNames().allSatisfy { $0.hasSuffix(".committed") }, "\(fixture.stagingNames())")
    }

    /// After a conflict the path shows the other version, and ours is the conflicted copy: the
    /// staging file is not kept for the path (a later writer there starts from the other version).
    @Test func aConflictDropsTheStagingFileEvenWhileTheKernelServesIt() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let opened = fixture.memory.externalWrite("/c.txt", bytes("base"))
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        let file = try engine.beginWrite(path: "/c.txt", base: .revision(opened.rev!))
        #expect(engine.retainStaging(path: "/c.txt", file: file))
        fixture.memory.externalWrite("/c.txt", bytes("theirs"))
        try file.write(at: 0, bytes("ours!"))
        let generation = try engine.close(path: "/c.txt")
        try engine.waitUntilCommitted(path: "/c.txt", generation: generation, timeout: 10)
        #expect(fixture.memory.content("/c.txt") == bytes("theirs"))
        #expect(engine.stagingFile(path: "/c.txt") == nil)
        #expect(fixture.stagingNames().isEmpty)
        engine.releaseStaging(file)
    }

    @Test func aRetainedFileRemovedByAnUnlinkIsNotBroughtBack() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        let file = try engine.beginWrite(path: "/gone.bin", base: .newFile)
        #expect(engine.retainStaging(path: "/gone.bin", file: file))
        try file.write(at: 0, bytes("x"))
        let generation = try engine.close(path: "/gone.bin")
        try engine.waitUntilCommitted(path: "/gone.bin", generation: generation, timeout: 10)
        try engine.remove(path: "/gone.bin") { () throws(Errno) in }
        #expect(fixture.stagingNames().isEmpty)
        engine.releaseStaging(file)
        #expect(engine.stagingFile(path: "/gone.bin") == nil)
        // Not retained: a staging file the engine no longer has is refused (a file the engine
        // has under another path is the same file renamed: see the next test).
        #expect(!engine.retainStaging(path: "/gone.bin", file: file))
    }

    /// The facade reads the file's path, then asks the engine to keep its staging file for the
    /// kernel's open; a rename from another thread in between moved the file. Refused by path, the
    /// open was not counted, and a commit while the kernel still wrote handed the staging file to
    /// the disk cache under it.
    @Test func aFileRenamedJustBeforeTheKernelsOpenIsRetainedUnderItsNewName() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        let file = try engine.beginWrite(path: "/before.bin", base: .newFile)
        try engine.rename(from: "/before.bin", to: "/after.bin") { () throws(Errno) -> [String: WriteBase] in [:] }
        #expect(engine.retainStaging(path: "/before.bin", file: file))
        try file.write(at: 0, bytes("kernel"))
        let generation = try engine.close(path: "/after.bin", staging: file)
        try engine.waitUntilCommitted(path: "/after.bin", staging: file, generation: generation, timeout: 10)
        engine.deliverPendingEvents()
        #expect(fixture.memory.content("/after.bin") == bytes("kernel"))
        #expect(fixture.stagingNames() == [file.name])   // the kernel still serves it
        engine.releaseStaging(file)
        #expect(fixture.stagingNames().isEmpty)
    }

    /// While the kernel writes a staging file (nothing the daemon sees), its disk writeback is
    /// started as it grows, so the close's fdatasync waits for the tail only; the watching stops
    /// with the last open the kernel serves from it.
    @Test func theWritebackOfAStagingFileTheKernelWritesIsStartedAsItGrows() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let engine = try fixture.engine { $0.kernelWritebackThreshold = 1 << 20; $0.kernelWritebackInterval = 0.01 }
        defer { engine.shutdown(drainUntil: nil) }
        let file = try engine.beginWrite(path: "/grow.bin", base: .newFile)
        #expect(engine.retainStaging(path: "/grow.bin", file: file))   // the writer
        #expect(engine.retainStaging(path: "/grow.bin", file: file))   // a reader joined
        let chunk = [UInt8](repeating: 7, count: 1 << 20)
        // Less than the threshold: nothing started yet.
        try file.write(at: 0, Array(chunk[..<1000]))
        Thread.sleep(forTimeInterval: 0.1)
        #expect(engine.stagingWriteback.started.bytes == 0)
        for index in 0..<3 { try file.write(at: UInt64(index) << 20, chunk) }
        #expect(eventually { engine.stagingWriteback.started.bytes == 3 << 20 })
        #expect(engine.stagingWriteback.isWatching(file))

        engine.releaseStaging(file)
        #expect(engine.stagingWriteback.isWatching(file))   // the reader is left
        engine.releaseStaging(file)
        #expect(!engine.stagingWriteback.isWatching(file))
        #expect(eventually { !engine.stagingWriteback.threadRunning })
        // Grown after the last open ended: not watched any more.
        let before = engine.stagingWriteback.started
        try file.write(at: 3 << 20, chunk)
        Thread.sleep(forTimeInterval: 0.1)
        #expect(engine.stagingWriteback.started == before)
    }
}
