/// `WriteBackEngine.status()` while a file is still open for writing: it counts as pending with
/// the bytes written so far, never as "all committed", and its streamed chunks show as a transfer
/// marked `writing`.
import Foundation
import Testing
@testable import VFSCache

@Suite(.serialized, .timeLimit(.minutes(2))) struct WriteBackStatusTests {
    @Test func fileOpenForWritingIsPendingWithItsStreamedChunksAsATransfer() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        let file = try engine.beginWrite(path: "/Big.bin", base: .newFile)
        try file.write(at: 0, bytes("first bytes"))
        var status = engine.status()
        #expect(status.pendingFiles == 1)
        #expect(status.pendingBytes == 11)
        #expect(status.uploads.first?.openForWriting == true)
        #expect(status.transfers.isEmpty)   // small so far: nothing streamed

        let data = pseudoRandomBytes(13 << 20, seed: 31)
        try writeSequentially(engine, "/Big.bin", data)   // the same staging file, from byte 0
        #expect(eventually { engine.status().transfers.first?.bytesDone == 12 << 20 })
        status = engine.status()
        #expect(status.pendingFiles == 1)
        #expect(status.pendingBytes == 13 << 20)
        #expect(status.transfers.count == 1)
        #expect(status.transfers.first?.writing == true)
        #expect(status.transfers.first?.bytesTotal == 13 << 20)
        #expect(status.transfers.first?.path == "/Big.bin")

        // After close the same session goes on as an ordinary transfer, timed from the start of
        // the streaming (not from close, which would inflate its rate).
        fixture.probe.closeGate("finishBatch")
        let closedAt = Date()
        let generation = try engine.close(path: "/Big.bin")
        #expect(fixture.probe.waitUntilBlocked("finishBatch"))
        let afterClose = engine.status().transfers
        #expect(afterClose.first?.writing == false)
        #expect(afterClose.first?.bytesTotal == 13 << 20)
        #expect((afterClose.first?.startedAt ?? .distantFuture) < closedAt)
        fixture.probe.openGate("finishBatch")
        try engine.waitUntilCommitted(path: "/Big.bin", generation: generation, timeout: 30)
        #expect(eventually { engine.status().pendingFiles == 0 })
        #expect(engine.status().transfers.isEmpty)
    }
}
