/// The storage under the engine: the SQLite wrapper, the journal's durability across reopen, and
/// ENOSPC from a full cache disk surfacing at write or close, never as a silent drop.
import Foundation
import Testing
@testable import VFSCache
#if canImport(Glibc)
import Glibc
#endif

@Suite(.serialized) struct WriteBackStorageTests {
    @Test func sqliteRoundTripsValuesAndRollsBackFailedTransactions() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("dbxfs-sqlite-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let database = try SQLiteDatabase(path: directory.appendingPathComponent("t.sqlite").path)
        try database.execute("CREATE TABLE t(k TEXT PRIMARY KEY, n INTEGER, r REAL, b BLOB, u INTEGER)")
        try database.run("INSERT INTO t VALUES(?, ?, ?, ?, ?)", ["a", 42, 1.5, [UInt8]([0, 255]), UInt64.max])
        try database.run("INSERT INTO t VALUES(?, ?, ?, ?, ?)", ["b", nil as Int?, nil as Double?, nil as [UInt8]?, 1 as UInt64])
        let rows = try database.query("SELECT * FROM t ORDER BY k")
        #expect(rows.count == 2)
        #expect(rows[0].int("n") == 42 && rows[0].double("r") == 1.5 && rows[0].blob("b") == [0, 255])
        #expect(rows[0].uint64("u") == UInt64.max)
        #expect(rows[1]["n"] == .null)
        #expect(throws: SQLiteError.self) {
            try database.transaction {
                try database.run("UPDATE t SET n = 7 WHERE k = 'a'")
                try database.run("INSERT INTO t(k) VALUES('a')")   // duplicate key: the whole transaction goes
            }
        }
        #expect(try database.query("SELECT n FROM t WHERE k = 'a'").first?.int("n") == 42)
        do {
            try database.run("SELECT * FROM missing_table")
            Issue.record("expected an error")
        } catch {
            #expect(error.message.contains("missing_table"))
        }
    }

    @Test func journalRowsSurviveReopen() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("dbxfs-journal-\(UUID())")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: directory) }
        let record = UploadRecord(pathKey: "/a b/c.txt", path: "/A b/C.txt", staging: "x.data", base: .revision("0123456789a"),
                                  clientModified: Date(timeIntervalSince1970: 1_700_000_000), contentHash: String(repeating: "a", count: 64),
                                  size: 123, generation: 9, state: .uploading, sessionID: "s1", sessionConcurrent: true,
                                  sessionClosed: false, commitPath: nil, lastError: "boom", attempts: 2)
        do {
            let journal = try UploadJournal(cacheDirectory: directory)
            try journal.save(record)
            try journal.confirmChunk(staging: "x.data", sessionID: "s1", offset: 4 << 20, length: 4 << 20)
            try journal.saveGeneration(12)
        }
        let reopened = try UploadJournal(cacheDirectory: directory)
        #expect(try reopened.allRecords() == [record])
        #expect(try reopened.confirmedChunks(staging: "x.data", sessionID: "s1") == [4 << 20: 4 << 20])
        #expect(try reopened.confirmedChunks(staging: "x.data", sessionID: "s2").isEmpty)
        #expect(try reopened.lastGeneration() == 12)
    }

    @Test func chunkPlanRespectsTheFourMebibyteRule() {
        let plan = UploadPlanner.chunks(size: (8 << 20) + 5, chunkSize: 4 << 20)
        #expect(plan == [.init(offset: 0, length: 4 << 20), .init(offset: 4 << 20, length: 4 << 20), .init(offset: 8 << 20, length: 5)])
        #expect(UploadPlanner.chunks(size: 0, chunkSize: 4 << 20) == [.init(offset: 0, length: 0)])
    }

    @Test func fullCacheDiskIsENOSPCAtWriteNotASilentDrop() throws {
        guard getuid() == 0 else { return }   // mounting a tmpfs needs root
        let mountPoint = FileManager.default.temporaryDirectory.appendingPathComponent("dbxfs-enospc-\(UUID())")
        try FileManager.default.createDirectory(at: mountPoint, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(at: mountPoint) }
        guard run("/bin/mount", ["-t", "tmpfs", "-o", "size=1m", "tmpfs", mountPoint.path]) == 0 else {
            Issue.record("cannot mount a tmpfs at \(mountPoint.path)")
            return
        }
        defer { if run("/bin/umount", [mountPoint.path]) != 0 { _ = run("/bin/umount", ["-l", mountPoint.path]) } }
        let memory = InMemoryRemote()
        let probe = ProbeRemote(memory)
        probe.failBefore { _, _ in .unavailable("test: keep it local") }
        var configuration = WriteBackFixture.fastConfiguration()
        configuration.retryMaxDelay = 0.05
        let engine = try WriteBackEngine(cacheDirectory: mountPoint.appendingPathComponent("cache"), remote: probe, configuration: configuration)
        defer { engine.shutdown(drainUntil: nil) }
        let file = try engine.beginWrite(path: "/huge.bin", base: .newFile)
        let piece = [UInt8](repeating: 0xab, count: 256 << 10)
        var written: UInt64 = 0
        #expect(throws: Errno.noSpace) {
            for _ in 0..<16 { try file.write(at: written, piece); written += UInt64(piece.count) }
        }
        #expect(written < 1 << 20)
        // A file that fits is still journaled and kept.
        let small = try engine.beginWrite(path: "/fits.txt", base: .newFile)
        try? file.truncate(to: 0)
        try small.write(at: 0, Array("ok".utf8))
        let generation = try engine.close(path: "/fits.txt")
        #expect(generation > 0)
        // The file that hit ENOSPC is still open (never closed): pending as open for writing.
        #expect(engine.status().uploads.map(\.path) == ["/fits.txt", "/huge.bin"])
        #expect(engine.status().uploads.map(\.openForWriting) == [false, true])
    }

    private func run(_ tool: String, _ arguments: [String]) -> Int32 {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: tool)
        process.arguments = arguments
        do { try process.run() } catch { return -1 }
        process.waitUntilExit()
        return process.terminationStatus
    }
}
