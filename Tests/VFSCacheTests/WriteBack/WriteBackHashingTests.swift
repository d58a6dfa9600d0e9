/// The content hash of a file computed while it is written (PrefixHash.swift): nothing is read at
/// commit time, a change after the last report makes the commit read what it touched, and any
/// change below the hashed blocks, reported or not, or digests reported out of sequence, fall back
/// to hashing the whole file, so the commit always carries the hash of the bytes on disk.
import ContentHash
import Foundation
import Synchronization
import Testing
@testable import VFSCache

@Suite(.serialized, .timeLimit(.minutes(2))) struct WriteBackHashingTests {
    @Test func aFileHashedWhileWrittenIsNotReadAtTheCommit() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        let data = pseudoRandomBytes(21 << 20, seed: 21)   // 5 whole blocks + 1 MiB
        try writeSequentially(engine, "/hashed.bin", data)
        let generation = try engine.close(path: "/hashed.bin")
        try engine.waitUntilCommitted(path: "/hashed.bin", generation: generation, timeout: 30)
        #expect(sameBytes(fixture.memory.content("/hashed.bin"), data))
        #expect(fixture.probe.landedCommits == ["/hashed.bin"])
        #expect(engine.bytesHashedAtCommit.load(ordering: .relaxed) == 0)
        let event = fixture.events.waitFor { if case .committed = $0 { true } else { false } }
        guard case .committed(_, _, let entry)? = event else { Issue.record("no commit event"); return }
        #expect(entry.contentHash == DropboxContentHasher.hash(data))
    }

    /// One open of the file is served by the kernel (passthrough), another by the daemon, which
    /// reports its sequential writes and their digests. The kernel's writes reach neither the
    /// digests nor the staging file's change marks, so while the kernel may write, nothing the
    /// facade reports is used: the commit hashes the file as it is, and carries the kernel's bytes.
    @Test func digestsReportedWhileTheKernelAlsoWritesTheFileAreNotUsed() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        var data = pseudoRandomBytes(12 << 20, seed: 24)
        let file = try engine.beginWrite(path: "/mixed.bin", base: .newFile)
        #expect(engine.retainStaging(path: "/mixed.bin", file: file))
        try writeSequentially(engine, "/mixed.bin", data)
        let fd = open(file.url.path, O_WRONLY)
        #expect(pwrite(fd, "KERNEL", 6, 10) == 6)
        close(fd)
        data.replaceSubrange(10..<16, with: bytes("KERNEL"))
        let generation = try engine.close(path: "/mixed.bin", staging: file)
        engine.releaseStaging(file)
        try engine.waitUntilCommitted(path: "/mixed.bin", generation: generation, timeout: 30)
        #expect(fixture.memory.content("/mixed.bin").map { DropboxContentHasher.hash($0) } == DropboxContentHasher.hash(data))
        #expect(fixture.probe.landedCommits == ["/mixed.bin"])
        #expect(engine.bytesHashedAtCommit.load(ordering: .relaxed) == 12 << 20)
    }

    @Test func reportedRewriteBelowTheHashedBlocksHashesTheWholeFile() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        var data = pseudoRandomBytes(16 << 20, seed: 22)
        try writeSequentially(engine, "/patched.bin", data)
        #expect(eventually { digestedBlocks(engine, "/patched.bin") == 4 })
        engine.noteRewrite(path: "/patched.bin")
        try engine.stagingFile(path: "/patched.bin")!.write(at: 4 << 20, bytes("PATCHED"))
        data.replaceSubrange((4 << 20)..<((4 << 20) + 7), with: bytes("PATCHED"))
        let generation = try engine.close(path: "/patched.bin")
        try engine.waitUntilCommitted(path: "/patched.bin", generation: generation, timeout: 30)
        #expect(sameBytes(fixture.memory.content("/patched.bin"), data))
        #expect(engine.bytesHashedAtCommit.load(ordering: .relaxed) == 16 << 20)
    }

    @Test func unreportedRewriteBelowTheHashedBlocksIsCaughtByTheStagingFile() throws {
        // The facade forgot noteRewrite: the staging file's record of the lowest change still
        // makes the commit hash the whole file, so the hash matches the bytes on disk, and its
        // record of what the stream read drops the session that holds the old bytes.
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        var data = pseudoRandomBytes(12 << 20, seed: 23)
        try writeSequentially(engine, "/quiet.bin", data)
        #expect(eventually { digestedBlocks(engine, "/quiet.bin") == 3 })
        try engine.stagingFile(path: "/quiet.bin")!.write(at: 5, bytes("X"))
        data[5] = UInt8(ascii: "X")
        let generation = try engine.close(path: "/quiet.bin")
        try engine.waitUntilCommitted(path: "/quiet.bin", generation: generation, timeout: 30)
        #expect(sameBytes(fixture.memory.content("/quiet.bin"), data))
        #expect(engine.bytesHashedAtCommit.load(ordering: .relaxed) >= 12 << 20)
    }

    @Test func truncateBelowTheHashedBlocksHashesWhatIsLeft() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        let data = pseudoRandomBytes(16 << 20, seed: 24)
        try writeSequentially(engine, "/cut.bin", data)
        #expect(eventually { digestedBlocks(engine, "/cut.bin") == 4 })
        try engine.stagingFile(path: "/cut.bin")!.truncate(to: 9 << 20)
        let generation = try engine.close(path: "/cut.bin")
        try engine.waitUntilCommitted(path: "/cut.bin", generation: generation, timeout: 30)
        #expect(sameBytes(fixture.memory.content("/cut.bin"), Array(data.prefix(9 << 20))))
    }

    @Test func unreportedChangeBetweenTwoReportsIsCaughtAtTheNextReport() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        var data = pseudoRandomBytes(12 << 20, seed: 25)
        try writeSequentially(engine, "/between.bin", Array(data.prefix(8 << 20)))
        #expect(digestedBlocks(engine, "/between.bin") == 2)
        // Changed behind the facade's back, then the writer goes on as if nothing happened: its
        // digests of blocks 2... are right, but block 0 on disk no longer matches digest 0.
        let file = try #require(engine.stagingFile(path: "/between.bin"))
        try file.write(at: 7, bytes("Y"))
        data[7] = UInt8(ascii: "Y")
        let digester = BlockDigester()
        _ = data.prefix(8 << 20).withUnsafeBytes { digester.update($0) }
        let tail = Array(data[(8 << 20)...])
        try file.write(at: 8 << 20, tail)
        let completed = CompletedBlocks(firstIndex: 2, digests: tail.withUnsafeBytes { digester.update($0) })
        engine.noteSequentialProgress(path: "/between.bin", contiguousBytes: 12 << 20, completedBlocks: completed)
        #expect(digestedBlocks(engine, "/between.bin") == -1)
        let generation = try engine.close(path: "/between.bin")
        try engine.waitUntilCommitted(path: "/between.bin", generation: generation, timeout: 30)
        #expect(sameBytes(fixture.memory.content("/between.bin"), data))
        #expect(engine.bytesHashedAtCommit.load(ordering: .relaxed) == 12 << 20)
    }

    @Test func aChangeInTheLastPartialBlockAfterTheLastReportRereadsOnlyThatBlock() throws {
        // Below the whole blocks nothing changed, so their digests hold; the partial block's
        // digest from the last report does not, and that block is read again.
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        var data = pseudoRandomBytes((12 << 20) + 1000, seed: 27)
        try writeSequentially(engine, "/tail.bin", data)
        try engine.stagingFile(path: "/tail.bin")!.write(at: (12 << 20) + 10, bytes("Z"))
        data[(12 << 20) + 10] = UInt8(ascii: "Z")
        let generation = try engine.close(path: "/tail.bin")
        try engine.waitUntilCommitted(path: "/tail.bin", generation: generation, timeout: 30)
        #expect(sameBytes(fixture.memory.content("/tail.bin"), data))
        #expect(engine.bytesHashedAtCommit.load(ordering: .relaxed) == 1000)
    }

    @Test func digestsReportedOutOfSequenceAreNotUsed() throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let engine = try fixture.engine(); defer { engine.shutdown(drainUntil: nil) }
        let data = pseudoRandomBytes(8 << 20, seed: 26)
        let file = try engine.beginWrite(path: "/skipped.bin", base: .newFile)
        try file.write(at: 0, data)
        // Digests claiming to start at block 1: a facade bug must not produce a wrong hash.
        let wrong = CompletedBlocks(firstIndex: 1, digests: [sha256(data.prefix(4 << 20))])
        engine.noteSequentialProgress(path: "/skipped.bin", contiguousBytes: 8 << 20, completedBlocks: wrong)
        let generation = try engine.close(path: "/skipped.bin")
        try engine.waitUntilCommitted(path: "/skipped.bin", generation: generation, timeout: 30)
        #expect(sameBytes(fixture.memory.content("/skipped.bin"), data))
        #expect(engine.bytesHashedAtCommit.load(ordering: .relaxed) == 8 << 20)
    }

    /// Compares without printing megabytes of array on failure.
    private func sameBytes(_ stored: [UInt8]?, _ expected: [UInt8]) -> Bool { stored == expected }

    private func digestedBlocks(_ engine: WriteBackEngine, _ path: String) -> Int {
        engine.condition.lock(); defer { engine.condition.unlock() }
        guard let prefix = engine.files[WriteBackEngine.key(path)]?.prefixHash, !prefix.invalid else { return -1 }
        return prefix.digests.count
    }

}
