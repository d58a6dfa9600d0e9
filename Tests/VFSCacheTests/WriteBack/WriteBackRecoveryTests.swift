/// Crash safety: an engine stopped abruptly (as by kill -9: no drain, no journal write after the
/// stop) and a new engine on the same cache directory must deliver everything, exactly once and
/// byte-exact, and resume a concurrent session from the chunks the server confirmed.
import ContentHash
import Foundation
import Testing
@testable import VFSCache

@Suite(.serialized, .timeLimit(.minutes(2))) struct WriteBackRecoveryTests {
    @Test func pendingUploadsSurviveACrashAndArriveExactlyOnce() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        fixture.probe.closeGate("appendSession")
        fixture.probe.closeGate("upload")
        var expected: [String: [UInt8]] = [:]
        let first = try fixture.engine()
        for index in 0..<40 {
            let data = bytes("small file \(index)")
            try fixture.put(first, "/crash/s\(index).txt", data)
            expected["/crash/s\(index).txt"] = data
        }
        let big = pseudoRandomBytes(13 << 20, seed: 11)
        try fixture.put(first, "/crash/big.bin", big)
        expected["/crash/big.bin"] = big
        #expect(fixture.probe.waitUntilBlocked("appendSession", count: 2))
        first.stopAbruptly()

        // The new engine talks to the same account directly; the old one's threads stay stuck.
        let second = try fixture.engine(remote: fixture.memory)
        defer { second.shutdown(drainUntil: nil) }
        #expect(second.status().pendingFiles == 41)
        #expect(second.waitForAll(deadline: Date().addingTimeInterval(30)).isEmpty)
        fixture.probe.openGate("appendSession")
        fixture.probe.openGate("upload")
        Thread.sleep(forTimeInterval: 0.1)   // let the dead engine's threads run out: they must change nothing
        for (path, data) in expected { #expect(fixture.memory.content(path) == data, "\(path)") }
        #expect(fixture.memory.allPaths().count == expected.count + 1)   // + the folder: no copies
        #expect(eventually { fixture.stagingNames().isEmpty })   // once the commit events were handled
        #expect(try fixture.journalRows() == 0)
    }

    /// The engine "dies" at each of many points of its conversation with Dropbox (before a call,
    /// or after a call landed but before its reply); a new engine must finish the job exactly.
    @Test(arguments: [0, 1, 2, 3, 5, 8, 11, 14, 17, 20, 23, 26, 29, 31, 33, 35, 37, 39, 41, 43, 10_000])
    func killPointLosesNothing(boundary: Int) throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let existing = fixture.memory.externalWrite("/k/edit.txt", bytes("before"))
        fixture.probe.freeze(afterBoundaries: boundary)
        let first = try fixture.engine { $0.gatherDelay = 0.02 }
        var expected: [String: [UInt8]] = [:]
        for index in 0..<6 {
            expected["/k/new\(index).txt"] = bytes("new \(index)")
            try fixture.put(first, "/k/new\(index).txt", expected["/k/new\(index).txt"]!)
        }
        expected["/k/edit.txt"] = bytes("after")
        try fixture.put(first, "/k/edit.txt", bytes("after"), base: .revision(existing.rev!))
        expected["/k/big.bin"] = pseudoRandomBytes(10 << 20, seed: UInt64(boundary))
        try fixture.put(first, "/k/big.bin", expected["/k/big.bin"]!)
        _ = eventually(timeout: 3) { fixture.probe.isFrozen && first.status().transfers.count > 0 || first.status().pendingFiles == 0 }
        first.stopAbruptly()

        let second = try fixture.engine(remote: fixture.memory)
        #expect(second.waitForAll(deadline: Date().addingTimeInterval(30)).isEmpty)
        second.shutdown(drainUntil: nil)
        fixture.probe.thaw()   // the dead engine's stuck calls go through now: they must not matter
        Thread.sleep(forTimeInterval: 0.05)
        for (path, data) in expected { #expect(fixture.memory.content(path) == data, "\(path) at kill point \(boundary)") }
        #expect(fixture.memory.allPaths().count == expected.count + 1, "no conflicted copies or strays at kill point \(boundary)")
        #expect(eventually { fixture.stagingNames().isEmpty })   // once the commit events were handled
        #expect(try fixture.journalRows() == 0)
        if boundary == 10_000 { print("kill points: a run without a crash passes \(fixture.probe.boundariesPassed) call boundaries") }
    }

    @Test func commitThatLandedJustBeforeTheCrashIsNotSentAgain() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let original = fixture.memory.externalWrite("/db.sqlite", bytes("v1"))
        // The commit reaches Dropbox; the process dies before it hears the reply.
        fixture.probe.failAfter { operation, _ in operation == "upload" ? .unavailable("test: killed") : nil }
        fixture.probe.closeGate("metadata")
        let first = try fixture.engine()
        try fixture.put(first, "/db.sqlite", bytes("v2"), base: .revision(original.rev!))
        #expect(fixture.events.waitFor { if case .failed = $0 { true } else { false } } != nil)
        first.stopAbruptly()
        fixture.probe.openGate("metadata")
        let second = try fixture.engine(remote: fixture.memory)
        defer { second.shutdown(drainUntil: nil) }
        #expect(second.waitForAll(deadline: Date().addingTimeInterval(10)).isEmpty)
        #expect(fixture.memory.content("/db.sqlite") == bytes("v2"))
        #expect(fixture.memory.allPaths() == ["/db.sqlite"])
    }

    @Test func burstAfterRecoveredCommitsStillUploadsEveryNewcomer() throws {
        // Files whose commit landed just before a crash leave the batch window as soon as the new
        // engine sees them on Dropbox; files closed right after must still be sent, not stranded.
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        // 3 × (startSession + append) = 12 call boundaries, then finishBatch enters (13) and lands:
        // the process dies before it hears the reply (boundary 14).
        fixture.probe.freeze(afterBoundaries: 13)
        let first = try fixture.engine { $0.gatherDelay = 0.3 }
        for index in 0..<3 { try fixture.put(first, "/r/landed\(index).txt", bytes("landed \(index)")) }
        #expect(eventually { fixture.probe.isFrozen && fixture.memory.content("/r/landed2.txt") != nil })
        first.stopAbruptly()
        fixture.probe.kill()
        let second = try fixture.engine(remote: fixture.memory) { $0.gatherDelay = 0.3 }
        defer { second.shutdown(drainUntil: nil) }
        // The recovered files find their bytes on Dropbox and leave the (still gathering) window.
        #expect(eventually { second.status().pendingFiles == 0 })
        try fixture.put(second, "/r/new.txt", bytes("closed after the restart"))
        #expect(second.waitForAll(deadline: Date().addingTimeInterval(20)).isEmpty)
        let newFileFailures = fixture.events.all.filter { if case .failed(let path, _, _, _) = $0 { path == "/r/new.txt" } else { false } }
        #expect(newFileFailures.isEmpty, "the newcomer was stranded: \(newFileFailures)")
        #expect(fixture.memory.content("/r/new.txt") == bytes("closed after the restart"))
        for index in 0..<3 { #expect(fixture.memory.content("/r/landed\(index).txt") == bytes("landed \(index)")) }
    }

    @Test func sessionResumesFromTheConfirmedChunks() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        // 5 chunks of 4 MiB + 1 MiB: the first engine gets chunks at 0, 4 and 8 MiB confirmed.
        let data = pseudoRandomBytes(21 << 20, seed: 5)
        fixture.probe.failBefore { operation, key in
            guard operation == "appendSession", let offset = UInt64(key.split(separator: "@").last ?? "") else { return nil }
            return offset >= 12 << 20 ? .unavailable("test: cable pulled") : nil
        }
        let first = try fixture.engine { $0.chunksInFlight = 1 }
        try fixture.put(first, "/movie.mkv", data)
        #expect(fixture.events.waitFor { if case .failed = $0 { true } else { false } } != nil)
        first.stopAbruptly()
        #expect(fixture.memory.calls("startSession") == 1)
        let appendsBefore = fixture.memory.calls("appendSession")
        #expect(appendsBefore == 3)

        fixture.probe.failBefore { _, _ in nil }
        let second = try fixture.engine()
        defer { second.shutdown(drainUntil: nil) }
        #expect(second.waitForAll(deadline: Date().addingTimeInterval(30)).isEmpty)
        #expect(fixture.memory.content("/movie.mkv") == data)
        #expect(fixture.memory.calls("startSession") == 1, "the session was still valid: no new one")
        #expect(fixture.memory.calls("appendSession") - appendsBefore == 3, "only 12..16 MiB, 16..20 MiB and the closing 1 MiB")
    }

    @Test func expiredSessionRestartsFromByteZero() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let data = pseudoRandomBytes(17 << 20, seed: 6)
        fixture.probe.failBefore { operation, key in
            guard operation == "appendSession", let offset = UInt64(key.split(separator: "@").last ?? "") else { return nil }
            return offset >= 8 << 20 ? .unavailable("test: down") : nil
        }
        let first = try fixture.engine { $0.chunksInFlight = 1 }
        try fixture.put(first, "/archive.zip", data)
        #expect(fixture.events.waitFor { if case .failed = $0 { true } else { false } } != nil)
        first.stopAbruptly()
        // The server forgot the session meanwhile (sessions live 7 days).
        fixture.probe.failBefore { operation, key in
            operation == "appendSession" && key.hasPrefix("session-1@") ? .sessionGone("session-1") : nil
        }
        let second = try fixture.engine()
        defer { second.shutdown(drainUntil: nil) }
        #expect(second.waitForAll(deadline: Date().addingTimeInterval(30)).isEmpty)
        #expect(fixture.memory.content("/archive.zip") == data)
        #expect(fixture.memory.calls("startSession") == 2)
    }

    @Test func orphanStagingFilesAreSweptButJournaledOnesKept() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        fixture.probe.failBefore { _, _ in .unavailable("test: offline") }
        let first = try fixture.engine()
        try fixture.put(first, "/kept.txt", bytes("closed, journaled"))
        _ = try first.beginWrite(path: "/never-closed.txt", base: .newFile)
        first.stopAbruptly()
        #expect(fixture.stagingNames().count == 2)
        let second = try fixture.engine()
        defer { second.shutdown(drainUntil: nil) }
        #expect(fixture.stagingNames().count == 1)
        #expect(second.status().uploads.map(\.path) == ["/kept.txt"])
    }
}
