/// Files the kernel writes by itself (FUSE passthrough) are uploaded while they are written
/// (StreamingUpload.swift, "kernel streams"): the engine sends the chunks that settled, with their
/// content hash, and after close uses them only if the file still holds those bytes. The writes
/// here go to the staging file through a descriptor of their own, as the kernel's do: the engine
/// sees none of them, only the file's size growing.
import ContentHash
import Foundation
import Testing
@testable import VFSCache

@Suite(.serialized, .timeLimit(.minutes(2))) struct KernelStreamTests {
    private static let chunk = 4 << 20

    /// Small chunks and quick looks, so a few MiB are enough to stream; bytes settle after 50 ms
    /// (`settle`: nil keeps the default, 1 s), whatever the rate (`maxRate`: nil keeps the default).
    private func engine(_ fixture: WriteBackFixture, streaming: Bool = true, settle: TimeInterval? = 0.05,
                        maxRate: UInt64? = .max) throws -> WriteBackEngine {
        try fixture.engine {
            $0.kernelWritebackInterval = 0.01
            $0.streamKernelWrites = streaming
            if let settle { $0.kernelStreamSettle = settle }
            if let maxRate { $0.kernelStreamMaxRate = maxRate }
        }
    }

    /// The content hash of what Dropbox holds at `path` (a short message when a test fails).
    private func storedHash(_ fixture: WriteBackFixture, _ path: String) -> String? {
        fixture.memory.content(path).map { DropboxContentHasher.hash($0) }
    }

    /// Writes `bytes` at `offset` through a descriptor of its own, as the kernel does.
    private func kernelWrite(_ file: StagingFile, at offset: Int, _ bytes: [UInt8]) throws {
        let fd = open(file.url.path, O_WRONLY)
        guard fd >= 0 else { throw POSIXError(.EIO) }
        defer { close(fd) }
        let written = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, off_t(offset)) }
        guard written == bytes.count else { throw POSIXError(.EIO) }
    }

    /// Writes `data` at `start` a 4 MiB piece at a time, `pause` seconds after each.
    private func kernelAppend(_ file: StagingFile, _ data: [UInt8], at start: Int = 0, pause: TimeInterval = 0.05) throws {
        for offset in stride(from: 0, to: data.count, by: Self.chunk) {
            try kernelWrite(file, at: start + offset, Array(data[offset..<min(offset + Self.chunk, data.count)]))
            Thread.sleep(forTimeInterval: pause)
        }
    }

    /// Appends `data` slowly enough for the engine to see the file grow, then waits until
    /// `sentBeforeClose` chunks went out.
    private func writeWhileStreaming(_ fixture: WriteBackFixture, _ file: StagingFile, _ data: [UInt8], sentBeforeClose: Int) throws {
        try kernelAppend(file, data)
        #expect(eventually { fixture.memory.calls("appendSessionChecked") >= sentBeforeClose })
    }

    /// The last close of a kernel-written file, as the glue does it (flush, then release), and
    /// the wait until it is on Dropbox.
    private func closeLast(_ engine: WriteBackEngine, _ path: String, _ file: StagingFile) throws {
        let generation = try engine.close(path: path, staging: file)
        engine.releaseStaging(file)
        try engine.waitUntilCommitted(path: path, generation: generation, timeout: 30)
    }

    @Test func aFileTheKernelWritesIsUploadedWhileItIsWritten() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let engine = try engine(fixture); defer { engine.shutdown(drainUntil: nil) }
        let data = pseudoRandomBytes(6 * Self.chunk + 1000, seed: 41)
        let file = try engine.beginWrite(path: "/k.bin", base: .newFile)
        #expect(engine.retainStaging(path: "/k.bin", file: file))
        try writeWhileStreaming(fixture, file, data, sentBeforeClose: 4)
        let sentBeforeClose = fixture.memory.calls("appendSessionChecked")
        try closeLast(engine, "/k.bin", file)
        #expect(storedHash(fixture, "/k.bin") == DropboxContentHasher.hash(data))
        // The settled chunks went before close, in the session the commit used.
        #expect(sentBeforeClose >= 4)
        #expect(fixture.memory.calls("startSession") == 1)
        #expect(fixture.memory.calls("appendSessionChecked") + fixture.memory.calls("appendSession") == 7)
        #expect(engine.streamedSessionsUsed.load(ordering: .relaxed) == 1)
        #expect(engine.streamedSessionsDropped.load(ordering: .relaxed) == 0)
        #expect(fixture.probe.landedCommits == ["/k.bin"])
    }

    /// The writer goes back, after those bytes were sent, and patches the file's start (as zip,
    /// tar or a linker do): the session holds the old bytes, and Dropbox would commit them as
    /// they are (it checks no whole-file hash at finish). The upload must see that and send the
    /// file again: the only commit carries the bytes at close.
    @Test func aKernelWriterThatGoesBackBeforeCloseCommitsOnlyTheBytesAtClose() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let engine = try engine(fixture); defer { engine.shutdown(drainUntil: nil) }
        var data = pseudoRandomBytes(5 * Self.chunk, seed: 42)
        let file = try engine.beginWrite(path: "/z.bin", base: .newFile)
        #expect(engine.retainStaging(path: "/z.bin", file: file))
        try writeWhileStreaming(fixture, file, data, sentBeforeClose: 3)
        try kernelWrite(file, at: 100, bytes("HEADER"))
        data.replaceSubrange(100..<106, with: bytes("HEADER"))
        try closeLast(engine, "/z.bin", file)
        #expect(storedHash(fixture, "/z.bin") == DropboxContentHasher.hash(data))
        #expect(fixture.probe.landedCommits == ["/z.bin"])
        #expect(engine.streamedSessionsDropped.load(ordering: .relaxed) == 1)
        #expect(engine.streamedSessionsUsed.load(ordering: .relaxed) == 0)
        #expect(fixture.memory.calls("startSession") == 2)
    }

    /// Once a stream's chunks were found changed, the file writes in place (a database, an
    /// image): its next versions are not streamed while the engine keeps it, else each would be
    /// sent twice.
    @Test func aFileFoundRewrittenInPlaceIsNotStreamedAgain() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let engine = try engine(fixture); defer { engine.shutdown(drainUntil: nil) }
        var data = pseudoRandomBytes(4 * Self.chunk, seed: 47)
        let file = try engine.beginWrite(path: "/db.bin", base: .newFile)
        #expect(engine.retainStaging(path: "/db.bin", file: file))
        try writeWhileStreaming(fixture, file, data, sentBeforeClose: 2)
        try kernelWrite(file, at: 0, bytes("page"))
        data.replaceSubrange(0..<4, with: bytes("page"))
        let first = try engine.close(path: "/db.bin", staging: file)
        try engine.waitUntilCommitted(path: "/db.bin", generation: first, timeout: 30)
        #expect(engine.streamedSessionsDropped.load(ordering: .relaxed) == 1)
        // The kernel's open is still there; the file grows again.
        let sent = fixture.memory.calls("appendSessionChecked")
        #expect(try engine.beginWrite(path: "/db.bin", base: .newFile) === file)
        let more = pseudoRandomBytes(3 * Self.chunk, seed: 48)
        try kernelAppend(file, more, at: data.count)
        #expect(fixture.memory.calls("appendSessionChecked") == sent)
        try closeLast(engine, "/db.bin", file)
        #expect(storedHash(fixture, "/db.bin") == DropboxContentHasher.hash(data + more))
        #expect(fixture.memory.calls("appendSessionChecked") == sent)
    }

    /// A file set to its final size first and filled in afterwards never settles: nothing of it
    /// is sent before close (it would be bytes not written yet).
    @Test func aFileSizedFirstAndFilledAfterwardsIsNotStreamed() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let engine = try engine(fixture); defer { engine.shutdown(drainUntil: nil) }
        let data = pseudoRandomBytes(5 * Self.chunk, seed: 43)
        let file = try engine.beginWrite(path: "/s.bin", base: .newFile)
        #expect(engine.retainStaging(path: "/s.bin", file: file))
        try kernelWrite(file, at: data.count - 1, [data.last!])
        for offset in stride(from: 0, to: data.count - 1, by: Self.chunk) {
            Thread.sleep(forTimeInterval: 0.05)
            try kernelWrite(file, at: offset, Array(data[offset..<min(offset + Self.chunk, data.count - 1)]))
        }
        Thread.sleep(forTimeInterval: 0.1)
        #expect(fixture.memory.calls("appendSessionChecked") == 0)
        try closeLast(engine, "/s.bin", file)
        #expect(storedHash(fixture, "/s.bin") == DropboxContentHasher.hash(data))
        #expect(fixture.memory.calls("appendSessionChecked") == 0)
    }

    /// A truncate below what was sent drops the stream at once; the upload after close sends the
    /// file as it is then.
    @Test func aTruncateBelowWhatWasSentDropsTheStream() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let engine = try engine(fixture); defer { engine.shutdown(drainUntil: nil) }
        let first = pseudoRandomBytes(4 * Self.chunk, seed: 44)
        let file = try engine.beginWrite(path: "/t.bin", base: .newFile)
        #expect(engine.retainStaging(path: "/t.bin", file: file))
        try writeWhileStreaming(fixture, file, first, sentBeforeClose: 2)
        let fd = open(file.url.path, O_WRONLY)
        #expect(ftruncate(fd, 0) == 0)
        close(fd)
        Thread.sleep(forTimeInterval: 0.05)
        let second = pseudoRandomBytes(3 * Self.chunk + 7, seed: 45)
        try kernelWrite(file, at: 0, second)
        Thread.sleep(forTimeInterval: 0.1)
        try closeLast(engine, "/t.bin", file)
        #expect(storedHash(fixture, "/t.bin") == DropboxContentHasher.hash(second))
        #expect(fixture.probe.landedCommits == ["/t.bin"])
        #expect(engine.streamedSessionsUsed.load(ordering: .relaxed) == 0)
    }

    /// A quick writer (here 20 MiB in a few tens of milliseconds, as `cp` writes) is done before
    /// its bytes settle (1 s by default): it does not share the CPU with its own upload.
    @Test func aQuickWriterIsDoneBeforeAnythingSettles() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let engine = try engine(fixture, settle: nil); defer { engine.shutdown(drainUntil: nil) }
        let data = pseudoRandomBytes(5 * Self.chunk, seed: 49)
        let file = try engine.beginWrite(path: "/q.bin", base: .newFile)
        #expect(engine.retainStaging(path: "/q.bin", file: file))
        try kernelAppend(file, data, pause: 0.02)
        try closeLast(engine, "/q.bin", file)
        #expect(storedHash(fixture, "/q.bin") == DropboxContentHasher.hash(data))
        #expect(fixture.memory.calls("appendSessionChecked") == 0)
    }

    /// A writer faster than `kernelStreamMaxRate` is left alone, however long it writes: its
    /// upload would take CPU from it, and it is done soon.
    @Test func aWriterFasterThanTheMaximumRateIsNotStreamed() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let engine = try engine(fixture, maxRate: 16 << 20); defer { engine.shutdown(drainUntil: nil) }
        let data = pseudoRandomBytes(6 * Self.chunk, seed: 50)
        let file = try engine.beginWrite(path: "/f.bin", base: .newFile)
        #expect(engine.retainStaging(path: "/f.bin", file: file))
        try kernelAppend(file, data, pause: 0.04)   // 4 MiB every 40 ms: 100 MiB/s
        #expect(fixture.memory.calls("appendSessionChecked") == 0)
        try closeLast(engine, "/f.bin", file)
        #expect(storedHash(fixture, "/f.bin") == DropboxContentHasher.hash(data))
        #expect(fixture.memory.calls("appendSessionChecked") == 0)
    }

    /// With `streamKernelWrites` off, nothing goes before close.
    @Test func streamingCanBeTurnedOff() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let engine = try engine(fixture, streaming: false); defer { engine.shutdown(drainUntil: nil) }
        let data = pseudoRandomBytes(3 * Self.chunk, seed: 46)
        let file = try engine.beginWrite(path: "/o.bin", base: .newFile)
        #expect(engine.retainStaging(path: "/o.bin", file: file))
        try kernelAppend(file, data)
        #expect(fixture.memory.calls("appendSessionChecked") == 0)
        try closeLast(engine, "/o.bin", file)
        #expect(storedHash(fixture, "/o.bin") == DropboxContentHasher.hash(data))
        #expect(fixture.memory.calls("appendSessionChecked") == 0)
    }
}
