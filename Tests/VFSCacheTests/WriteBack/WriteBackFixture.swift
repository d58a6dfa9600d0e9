/// Shared set-up for the write-back tests: a temporary cache directory, an in-memory Dropbox behind
/// a `ProbeRemote`, engines with short delays, and helpers to write a file the way the facade will
/// (beginWrite, write, close).
import ContentHash
import Foundation
import Synchronization
@testable import VFSCache

final class WriteBackFixture: Sendable {
    let directory: URL
    let memory = InMemoryRemote()
    let probe: ProbeRemote
    let events = EventLog()

    init() {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("dbxfs-writeback-\(UUID().uuidString)")
        probe = ProbeRemote(memory)
    }

    /// Short delays so tests run in milliseconds; conflict dates pinned to 2026-11-29 UTC.
    static func fastConfiguration() -> WriteBackConfiguration {
        var configuration = WriteBackConfiguration()
        configuration.gatherDelay = 0.05
        configuration.maxGatherTime = 1
        configuration.namespaceGatherDelay = 0.02
        configuration.namespaceMaxGather = 0.25
        configuration.retryBaseDelay = 0.01
        configuration.retryMaxDelay = 0.1
        configuration.hardFailureRetryDelay = 0.3
        configuration.largeFileThreshold = 8 << 20
        configuration.chunkSize = 4 << 20
        configuration.now = { Date(timeIntervalSince1970: 1_795_953_600) }  // 2026-11-29 12:00 UTC
        configuration.timeZone = TimeZone(identifier: "UTC")!
        return configuration
    }

    func engine(remote: (any RemoteStore)? = nil, _ tweak: (inout WriteBackConfiguration) -> Void = { _ in }) throws -> WriteBackEngine {
        var configuration = Self.fastConfiguration()
        tweak(&configuration)
        let events = self.events
        return try WriteBackEngine(cacheDirectory: directory, remote: remote ?? probe, configuration: configuration,
                                   onEvent: { events.append($0) })
    }

    /// Writes `bytes` as a whole new version of `path` and closes it; returns the generation.
    @discardableResult
    func put(_ engine: WriteBackEngine, _ path: String, _ bytes: [UInt8], base: WriteBase = .newFile) throws -> UInt64 {
        let file = try engine.beginWrite(path: path, base: base)
        try file.truncate(to: 0)
        try file.write(at: 0, bytes)
        return try engine.close(path: path)
    }

    func stagingNames() -> [String] {
        ((try? FileManager.default.contentsOfDirectory(atPath: directory.appendingPathComponent("staging").path)) ?? []).sorted()
    }

    func journalRows() throws -> Int {
        let database = try SQLiteDatabase(path: directory.appendingPathComponent("journal.sqlite").path)
        return Int(try database.query("SELECT COUNT(*) AS n FROM uploads").first?.int64("n") ?? -1)
    }

    func remove() { try? FileManager.default.removeItem(at: directory) }
}

/// Events received from an engine, in order.
final class EventLog: Sendable {
    private let events = Mutex<[WriteBackEvent]>([])
    func append(_ event: WriteBackEvent) { events.withLock { $0.append(event) } }
    var all: [WriteBackEvent] { events.withLock { $0 } }

    /// Waits (briefly) until an event matching `predicate` arrived; events are delivered asynchronously.
    func waitFor(timeout: TimeInterval = 5, _ predicate: (WriteBackEvent) -> Bool) -> WriteBackEvent? {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if let found = all.first(where: predicate) { return found }
            Thread.sleep(forTimeInterval: 0.005)
        }
        return nil
    }
}

/// Deterministic pseudo-random bytes (xorshift), fast enough for tens of MiB in debug builds.
func pseudoRandomBytes(_ count: Int, seed: UInt64) -> [UInt8] {
    var state = seed | 1
    var out = [UInt8](repeating: 0, count: count)
    out.withUnsafeMutableBytes { raw in
        let words = raw.count / 8
        let base = raw.baseAddress!
        for index in 0..<words {
            state ^= state << 13; state ^= state >> 7; state ^= state << 17
            base.storeBytes(of: state, toByteOffset: index * 8, as: UInt64.self)
        }
        for index in (words * 8)..<raw.count { raw[index] = UInt8(truncatingIfNeeded: state >> (index % 8)) }
    }
    return out
}

func bytes(_ text: String) -> [UInt8] { Array(text.utf8) }

/// Polls `condition` every few milliseconds until it holds or `timeout` passes.
func eventually(timeout: TimeInterval = 10, _ condition: () throws -> Bool) rethrows -> Bool {
    let deadline = Date().addingTimeInterval(timeout)
    while Date() < deadline {
        if try condition() { return true }
        Thread.sleep(forTimeInterval: 0.005)
    }
    return try condition()
}

/// Writes `data` in 1 MiB pieces, reporting the sequential prefix and the digests of completed
/// blocks after each, as the facade does (so large files stream and their blocks are hashed
/// while being written).
func writeSequentially(_ engine: WriteBackEngine, _ path: String, _ data: [UInt8]) throws {
    let file = try engine.beginWrite(path: path, base: .newFile)
    let digester = BlockDigester()
    var offset = 0
    while offset < data.count {
        let end = min(data.count, offset + (1 << 20))
        let piece = Array(data[offset..<end])
        try file.write(at: UInt64(offset), piece)
        let first = digester.completedBlocks
        let digests = piece.withUnsafeBytes { digester.update($0) }
        let completed = CompletedBlocks(firstIndex: first, digests: digests, tailDigest: digester.partialBlockDigest())
        offset = end
        engine.noteSequentialProgress(path: path, contiguousBytes: UInt64(offset), completedBlocks: completed)
    }
}
