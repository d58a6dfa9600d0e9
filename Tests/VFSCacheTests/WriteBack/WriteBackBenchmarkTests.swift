/// Figures for docs/WRITEBACK.md, printed rather than asserted (timings on a shared machine are
/// not pass/fail). Skipped unless DBXFS_WRITEBACK_BENCH=1:
///   DBXFS_WRITEBACK_BENCH=1 swift test --filter WriteBackBenchmarkTests
import Foundation
import Testing
@testable import VFSCache

@Suite(.serialized, .enabled(if: ProcessInfo.processInfo.environment["DBXFS_WRITEBACK_BENCH"] == "1"))
struct WriteBackBenchmarkTests {
    /// Cost of close() (fsync of the staging file + a durable journal commit), and commit calls
    /// of a 1000-file burst for several gathering delays.
    @Test func burstOfSmallFiles() throws {
        for delay in [0.02, 0.05, 0.15, 0.3] {
            let fixture = WriteBackFixture(); defer { fixture.remove() }
            let engine = try fixture.engine { $0.gatherDelay = delay; $0.maxGatherTime = WriteBackConfiguration().maxGatherTime }
            let start = Date()
            var closeTimes: [Double] = []
            for index in 0..<1000 {
                let file = try engine.beginWrite(path: "/b/\(index).txt", base: .newFile)
                try file.write(at: 0, [UInt8](repeating: UInt8(index % 256), count: 4096))
                let before = Date()
                try engine.close(path: "/b/\(index).txt")
                closeTimes.append(Date().timeIntervalSince(before))
            }
            let written = Date().timeIntervalSince(start)
            let left = engine.waitForAll(deadline: Date().addingTimeInterval(120))
            let total = Date().timeIntervalSince(start)
            engine.shutdown(drainUntil: nil)
            closeTimes.sort()
            print(String(format: "BENCH burst gather=%.0fms: 1000x4KiB written in %.2fs (close p50 %.2fms p99 %.2fms), all committed after %.2fs, commit calls: finishBatch=%d upload=%d, left=%d",
                         delay * 1000, written, closeTimes[500] * 1000, closeTimes[990] * 1000, total,
                         fixture.memory.calls("finishBatch"), fixture.memory.calls("upload"), left.count))
        }
    }

    /// Wall time of a 256 MiB upload through the engine against the in-memory remote, with a
    /// per-append delay standing in for network time, for several chunk parallelisms.
    @Test func largeFileParallelism() throws {
        let data = pseudoRandomBytes(256 << 20, seed: 1)
        for parallel in [1, 2, 4, 8] {
            let fixture = WriteBackFixture(); defer { fixture.remove() }
            fixture.probe.setAppendDelay(0.1)   // ~100 ms per 8 MiB request: an 80 MB/s link per connection
            let engine = try fixture.engine { $0.chunksInFlight = parallel; $0.chunkSize = 8 << 20 }
            let start = Date()
            try fixture.put(engine, "/big.bin", data)
            let closed = Date().timeIntervalSince(start)
            let left = engine.waitForAll(deadline: Date().addingTimeInterval(600))
            let total = Date().timeIntervalSince(start)
            engine.shutdown(drainUntil: nil)
            print(String(format: "BENCH large 256MiB chunks=8MiB inFlight=%d: close %.2fs, committed after %.2fs (%.0f MiB/s), max concurrent appends %d, left=%d",
                         parallel, closed, total, 256 / total, fixture.probe.maxConcurrentAppends, left.count))
        }
    }
}
