/// A commit whose outcome the engine never heard (the request timed out or the connection dropped
/// after Dropbox committed): the retry must not strand the file or send it all again. The session
/// is gone on the server by then, so the engine first asks whether the remote already holds
/// exactly our bytes (content hash), and if so it is our commit.
import Foundation
import Testing
@testable import VFSCache

@Suite(.serialized, .timeLimit(.minutes(2))) struct WriteBackLostCommitTests {
    @Test func timedOutLargeCommitThatLandedIsRecognisedAsOursWithoutReuploading() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        // finish_batch reaches Dropbox, but the client gives up on the reply (a low-speed timeout
        // surfaces as `.unavailable` once the client's retries are spent).
        let lost = LostReplies(times: 1, error: .unavailable("test: operation timed out"))
        fixture.probe.failAfter { operation, _ in operation == "finishBatch" ? lost.next() : nil }
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        let data = pseudoRandomBytes(10 << 20, seed: 41)
        let generation = try fixture.put(engine, "/video.mp4", data)
        try engine.waitUntilCommitted(path: "/video.mp4", generation: generation, timeout: 20)
        #expect(fixture.memory.content("/video.mp4") == data ? true : false)
        #expect(fixture.memory.allPaths() == ["/video.mp4"])
        #expect(engine.status().conflicts.isEmpty)
        // One session and its three appends: nothing was sent twice.
        #expect(fixture.memory.calls("startSession") == 1)
        #expect(fixture.memory.calls("appendSession") == 3)
        #expect(engine.status().pendingFiles == 0)
    }

    @Test func clientRetryOfALandedCommitSeesTheSessionGoneAndItIsOurs() throws {
        // The client's own retry of a finish_batch that landed unheard answers "session gone"
        // (lookup_failed/closed): without the content-hash check the whole file is sent again.
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        fixture.probe.replayFinishBatch(times: 1)
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        let data = pseudoRandomBytes(10 << 20, seed: 42)
        let generation = try fixture.put(engine, "/replayed.bin", data)
        try engine.waitUntilCommitted(path: "/replayed.bin", generation: generation, timeout: 20)
        #expect(fixture.memory.content("/replayed.bin") == data ? true : false)
        #expect(fixture.memory.allPaths() == ["/replayed.bin"])
        #expect(fixture.memory.calls("startSession") == 1)
        #expect(fixture.memory.calls("appendSession") == 3)
        #expect(engine.status().conflicts.isEmpty)
    }

    @Test func timedOutBatchCommitThatLandedIsRecognisedAsOurs() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let lost = LostReplies(times: 1, error: .unavailable("test: operation timed out"))
        fixture.probe.failAfter { operation, _ in operation == "finishBatch" ? lost.next() : nil }
        let engine = try fixture.engine { $0.gatherDelay = 0.2; $0.maxGatherTime = 5 }; defer { engine.shutdown(drainUntil: nil) }
        for index in 0..<5 { try fixture.put(engine, "/burst/f\(index).txt", bytes("file \(index)")) }
        #expect(engine.waitForAll(deadline: Date().addingTimeInterval(20)).isEmpty)
        for index in 0..<5 { #expect(fixture.memory.content("/burst/f\(index).txt") == bytes("file \(index)")) }
        #expect(engine.status().conflicts.isEmpty)
        #expect(fixture.memory.calls("startSession") == 5)
    }
}
