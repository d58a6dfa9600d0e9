/// The staging budget as back-pressure (WriteBack/StagingBudget.swift): a write through the daemon
/// waits while more written bytes wait for their upload than the budget, and never waits for what
/// no upload can send, nor past a stall.
import Foundation
import Testing
@testable import VFSCache

@Suite struct StagingBudgetTests {
    typealias Writable = VFSWriteTests.Writable

    /// Creates `name` in the root, writes `bytes` and closes it (its upload is then queued).
    private func writeAndClose(_ vfs: VFS, _ name: String, _ bytes: [UInt8]) throws {
        let (entry, open) = try vfs.create(parent: rootInode, name: name, flags: [.write])
        let ino = entry.attributes.ino
        try VFSWriteTests().write(vfs, ino, open.handle, at: 0, bytes)
        try VFSWriteTests().close(vfs, ino, open.handle)
    }

    /// Runs `work` on a thread; the semaphore is signalled when it returns.
    private func onThread(_ work: @escaping @Sendable () -> Void) -> DispatchSemaphore {
        let done = DispatchSemaphore(value: 0)
        Thread { work(); done.signal() }.start()
        return done
    }

    @Test func aWriteWaitsWhileMoreThanTheBudgetWaitsForItsUpload() throws {
        let remote = InMemoryRemote()
        let probe = ProbeRemote(remote)
        let w = try Writable(probe) { $0.stagingBudget = 1000; $0.stagingStallLimit = 60 }
        let first = testBytes(4000, seed: 1)
        probe.closeGate("upload")
        try writeAndClose(w.vfs, "a.bin", first)
        #expect(probe.waitUntilBlocked("upload"))

        let (entry, open) = try w.vfs.create(parent: rootInode, name: "b.bin", flags: [.write])
        let vfs = w.vfs
        let written = onThread {
            _ = try? Array("b".utf8).withUnsafeBytes { (buffer) throws(Errno) -> Int in
                try vfs.write(entry.attributes.ino, handle: open.handle, offset: 0, data: buffer)
            }
        }
        // 4000 bytes wait for an upload that is under way: the write waits for it.
        #expect(written.wait(timeout: .now() + 0.5) == .timedOut)
        #expect(remote.content("/a.bin") == nil)
        probe.openGate("upload")
        #expect(written.wait(timeout: .now() + 10) == .success)
        #expect(remote.content("/a.bin") == first)
        try VFSWriteTests().close(w.vfs, entry.attributes.ino, open.handle)
        w.sync()
        #expect(remote.content("/b.bin") == Array("b".utf8))
        #expect(w.vfs.writeBack!.backPressure.waits.load(ordering: .relaxed) >= 1)
    }

    @Test func uploadsThatSendNothingHoldAWriteOnlyUntilTheStallLimit() throws {
        let remote = InMemoryRemote()
        let probe = ProbeRemote(remote)
        let w = try Writable(probe) { $0.stagingBudget = 1000; $0.stagingStallLimit = 0.3 }
        probe.closeGate("upload")
        try writeAndClose(w.vfs, "a.bin", testBytes(4000, seed: 2))
        #expect(probe.waitUntilBlocked("upload"))

        let started = Date()
        try writeAndClose(w.vfs, "b.bin", testBytes(10, seed: 3))
        let waited = Date().timeIntervalSince(started)
        #expect(waited >= 0.3 && waited < 5)
        // Stalled: later writes do not wait again while nothing moves.
        let again = Date()
        try writeAndClose(w.vfs, "c.bin", testBytes(10, seed: 4))
        #expect(Date().timeIntervalSince(again) < 0.25)
        probe.openGate("upload")
        w.sync()
        #expect(remote.content("/c.bin") == testBytes(10, seed: 4))
    }

    /// The writer's own open file cannot be uploaded before its close: a file larger than the
    /// budget, written alone, never waits.
    @Test func aWriterAloneWithAFileLargerThanTheBudgetDoesNotWait() throws {
        let remote = InMemoryRemote()
        let w = try Writable(remote) { $0.stagingBudget = 1000; $0.stagingStallLimit = 60 }
        let (entry, open) = try w.vfs.create(parent: rootInode, name: "big.bin", flags: [.write])
        let started = Date()
        for part in 0..<8 {
            Thread.sleep(forTimeInterval: 0.012)   // past the 10 ms between looks at the load
            try VFSWriteTests().write(w.vfs, entry.attributes.ino, open.handle, at: UInt64(part * 4000), testBytes(4000, seed: UInt64(part)))
        }
        #expect(Date().timeIntervalSince(started) < 2)
        #expect(w.vfs.writeBack!.backPressure.waits.load(ordering: .relaxed) == 0)
        try VFSWriteTests().close(w.vfs, entry.attributes.ino, open.handle)
        w.sync()
        #expect(remote.content("/big.bin")?.count == 32000)
    }

    /// While Dropbox is unreachable nothing can drain: writes go on at once (up to the disk).
    @Test func aWriteDoesNotWaitWhileDropboxIsUnreachable() throws {
        let remote = InMemoryRemote()
        let probe = ProbeRemote(remote)
        let w = try Writable(probe) { $0.stagingBudget = 1000; $0.stagingStallLimit = 60 }
        probe.failBefore { operation, _ in operation == "upload" ? .unavailable("test: offline") : nil }
        try writeAndClose(w.vfs, "a.bin", testBytes(4000, seed: 5))
        let engine = try #require(w.vfs.writeBack)
        #expect(eventually { engine.status().offline })
        let started = Date()
        try writeAndClose(w.vfs, "b.bin", testBytes(10, seed: 6))
        #expect(Date().timeIntervalSince(started) < 1)
        probe.failBefore { _, _ in nil }
    }
}
