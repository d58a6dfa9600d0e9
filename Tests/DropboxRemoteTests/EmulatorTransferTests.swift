/// Large and interrupted transfers against the emulator: a 200 MiB concurrent-session upload
/// verified by content hash, streamed download of it, and cancel in the middle of transfers.
import ContentHash
import Foundation
import Synchronization
import Testing
@testable import DropboxRemote

@Suite(.serialized, .enabled(if: Emulator.isAvailable, "scripts/dbx-emulator is missing"))
struct EmulatorTransferTests {
    let emulator: Emulator
    let client: DropboxClient
    init() throws { emulator = try Emulator(); client = emulator.client() }

    @Test func concurrentSessionUploadOf200MiBIsVerifiedByContentHash() throws {
        let size = 200 * 1024 * 1024
        let file = try temporaryFile(count: size, seed: 42)
        defer { try? FileManager.default.removeItem(at: file) }
        let localHash = try DropboxContentHasher.hash(fileAt: file)

        let reports = Mutex<(count: Int, last: UInt64, monotonic: Bool)>((0, 0, true))
        let uploaded = try client.uploadFile(CommitInfo(path: "/big/200MiB.bin"), body: .file(file, offset: 0, length: UInt64(size)),
                                             fileContentHash: localHash, chunkSize: 16 * 1024 * 1024, parallelism: 4,
                                             progress: { done, total in
            reports.withLock { r in
                if done < r.last || total != UInt64(size) { r.monotonic = false }
                r.count += 1; r.last = done
            }
        })
        #expect(uploaded.size == UInt64(size))
        // The emulator computed the hash of what it stored; it must equal ours.
        #expect(uploaded.contentHash == localHash)
        let progress = reports.withLock { $0 }
        #expect(progress.monotonic && progress.last == UInt64(size) && progress.count > 10)
        let stats = try emulator.stats()
        #expect((stats["requests"]?["files/upload_session/append_v2"]?.int64 ?? 0) == 13)  // ceil(200/16)

        // Stream it back through the hasher: constant memory, same bytes.
        var hasher = DropboxContentHasher()
        var received: UInt64 = 0
        let metadata = try client.download(path: "/big/200MiB.bin") { buffer in
            hasher.update(buffer)
            received += UInt64(buffer.count)
            return true
        }
        #expect(received == UInt64(size) && metadata.rev == uploaded.rev)
        #expect(hasher.finalize() == localHash)
    }

    @Test func cancelStopsADownloadPromptly() throws {
        let data = pseudoRandomBytes(count: 16 * 1024 * 1024, seed: 3)
        _ = try client.upload(CommitInfo(path: "/slow.bin"), body: .data(data))
        try emulator.configure(["bandwidth": 2_000_000])
        let cancel = CancelHandle()
        var received = 0
        var cancelledAt: Date?
        #expect(throws: DropboxError.cancelled) {
            try client.download(path: "/slow.bin", cancel: cancel) { buffer in
                received += buffer.count
                if received >= 1_000_000 && cancelledAt == nil {
                    // Cancel from another thread, as a FUSE interrupt would.
                    Thread { cancel.cancel() }.start()
                    cancelledAt = Date()
                }
                return true
            }
        }
        let stoppedAfter = Date().timeIntervalSince(try #require(cancelledAt))
        #expect(stoppedAfter < 2, "took \(stoppedAfter) s to stop")
        #expect(received < data.count)
    }

    @Test func cancelStopsAnUploadAndNothingIsCommitted() throws {
        try emulator.configure(["bandwidth": 2_000_000])
        let cancel = CancelHandle()
        let data = pseudoRandomBytes(count: 16 * 1024 * 1024, seed: 4)
        let sent = Atomic<UInt64>(0)
        let started = Date()
        Thread {
            Thread.sleep(forTimeInterval: 0.7)
            cancel.cancel()
        }.start()
        #expect(throws: DropboxError.cancelled) {
            try client.upload(CommitInfo(path: "/cancelled.bin"), body: .data(data),
                              progress: { done, _ in sent.store(done, ordering: .relaxed) }, cancel: cancel)
        }
        #expect(Date().timeIntervalSince(started) < 3)
        #expect(sent.load(ordering: .relaxed) < UInt64(data.count))
        try emulator.configure(["bandwidth": 0])
        #expect(try client.metadataIfExists(path: "/cancelled.bin") == nil)
    }

    @Test func sinkReturningFalseCancels() throws {
        _ = try client.upload(CommitInfo(path: "/stop.bin"), body: .data(pseudoRandomBytes(count: 4 << 20, seed: 5)))
        #expect(throws: DropboxError.cancelled) {
            try client.download(path: "/stop.bin") { _ in false }
        }
    }
}
