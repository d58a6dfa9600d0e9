/// `too_many_write_operations` in every form real Dropbox sends it (issue 13, docs/CLIENT.md
/// "Write contention"): the client retries each with a jittered wait of at least the server's
/// `retry_after`, retries refused entries of a batch, and sends one batch commit at a time.
import ContentHash
import Foundation
import Synchronization
import Testing
@testable import DropboxRemote

@Suite(.serialized, .enabled(if: Emulator.isAvailable, "scripts/dbx-emulator is missing"))
struct WriteContentionTests {
    let emulator: Emulator
    init() throws { emulator = try Emulator() }

    /// The next `count` write commits meet contention, answered in `form`.
    func contend(_ form: String, count: Int = 1, retryAfter: Int = 1) throws {
        try emulator.configure(["write_contention_form": .string(form), "write_contention_next": .int(Int64(count)),
                                "retry_after": .int(Int64(retryAfter))])
    }

    @Test func contentionAnsweredWith409IsRetriedOnEveryWriteRoute() throws {
        let client = emulator.client()
        _ = try client.createFolder(path: "/c")
        _ = try client.upload(CommitInfo(path: "/c/a.txt"), body: .data(Data("a".utf8)))
        try contend("409")
        _ = try client.createFolder(path: "/c/new")
        try contend("409")
        _ = try client.move(from: "/c/a.txt", to: "/c/b.txt")
        try contend("409")
        _ = try client.copy(from: "/c/b.txt", to: "/c/copy.txt")
        try contend("409")
        _ = try client.delete(path: "/c/copy.txt")
        try contend("409")
        _ = try client.upload(CommitInfo(path: "/c/up.txt"), body: .data(Data("up".utf8)))
        let session = try client.uploadSessionStart(close: true, body: .data(Data("s".utf8)))
        try contend("409")
        _ = try client.uploadSessionFinish(sessionID: session, offset: 1, commit: CommitInfo(path: "/c/s.txt"))
        let names = Set(try client.allEntries(path: "/c").map(\.name))
        #expect(names == ["new", "b.txt", "up.txt", "s.txt"])
        let contended = try emulator.stats()["faults"]?["write_contention"]?.int64 ?? 0
        #expect(contended == 6)
    }

    @Test func contentionWaitsAreJitteredAndNeverShorterThanRetryAfter() throws {
        let sleeper = RealRecordingSleeper()
        let client = emulator.client(retryPolicy: RetryPolicy(maxRateLimitDelay: 10, sleeper: sleeper))
        try contend("429_header_only", count: 2, retryAfter: 1)
        _ = try client.createFolder(path: "/jitter")
        let waits = sleeper.sleeps
        print("waits after two header-only 429s (Retry-After: 1): \(waits)")
        #expect(waits.count == 2)
        #expect(waits.allSatisfy { $0 >= 1 })
        #expect(Set(waits).count == waits.count)   // jittered: no two threads wake together
    }

    @Test func refusedEntriesOfABatchAreCommittedAgain() throws {
        let client = emulator.client()
        var entries: [UploadSessionFinishEntry] = []
        for i in 0..<4 {
            let data = Data("entry \(i)".utf8)
            let session = try client.uploadSessionStart(close: true, body: .data(data))
            entries.append(UploadSessionFinishEntry(sessionID: session, length: UInt64(data.count),
                                                    commit: CommitInfo(path: "/batch/e\(i).txt"),
                                                    fileContentHash: DropboxContentHasher.hash(data)))
        }
        try contend("batch_entry", count: 3)
        let results = try client.uploadSessionFinishBatch(entries)
        for (i, result) in results.enumerated() {
            #expect(try result.get().name == "e\(i).txt")
        }
        #expect(try client.allEntries(path: "/batch").count == 4)
    }

    @Test func refusedEntriesOfNamespaceBatchesAreSentAgain() throws {
        let client = emulator.client()
        for i in 0..<3 { _ = try client.upload(CommitInfo(path: "/nsb/f\(i)"), body: .data(Data("\(i)".utf8))) }
        try contend("batch_entry", count: 2)
        let folders = try client.createFolderBatch(paths: ["/nsb/d0", "/nsb/d1", "/nsb/d2"])
        #expect(folders.allSatisfy { (try? $0.get()) != nil })
        try contend("batch_entry", count: 2)
        let moves = try client.moveBatch((0..<3).map { RelocationPath(from: "/nsb/f\($0)", to: "/nsb/d\($0)/f") })
        #expect(moves.allSatisfy { (try? $0.get()) != nil })
        try contend("batch_entry", count: 2)
        let deletes = try client.deleteBatch((0..<3).map { DeleteArg(path: "/nsb/d\($0)/f") })
        #expect(deletes.allSatisfy { (try? $0.get()) != nil })
        #expect(Set(try client.allEntries(path: "/nsb", recursive: true).map(\.name)) == ["nsb", "d0", "d1", "d2"])
        let contended = try emulator.stats()["faults"]?["write_contention"]?.int64 ?? 0
        #expect(contended == 6)
    }

    @Test func batchCommitsGoOneAtATime() throws {
        let client = emulator.client()
        var batches: [[UploadSessionFinishEntry]] = []
        for b in 0..<3 {
            var entries: [UploadSessionFinishEntry] = []
            for i in 0..<2 {
                let data = Data("batch \(b) entry \(i)".utf8)
                let session = try client.uploadSessionStart(close: true, body: .data(data))
                entries.append(UploadSessionFinishEntry(sessionID: session, length: UInt64(data.count),
                                                        commit: CommitInfo(path: "/serial/b\(b)-\(i).txt")))
            }
            batches.append(entries)
        }
        // Each commit takes 300 ms on the server: three sent at once would overlap.
        try emulator.configure(["latency_ms": 300])
        let failures = Atomic<Int>(0)
        let group = DispatchGroup()
        for entries in batches {
            group.enter()
            Thread {
                defer { group.leave() }
                do {
                    for result in try client.uploadSessionFinishBatch(entries) { _ = try result.get() }
                } catch { failures.add(1, ordering: .relaxed) }
            }.start()
        }
        group.wait()
        try emulator.configure(["latency_ms": 0])
        let overlaps = try emulator.stats()["faults"]?["batch_overlap"]?.int64 ?? -1
        print("three concurrent batch commits: \(overlaps) overlapped on the server")
        #expect(failures.load(ordering: .relaxed) == 0)
        #expect(overlaps == 0)
        #expect(try client.allEntries(path: "/serial").count == 6)
    }
}
