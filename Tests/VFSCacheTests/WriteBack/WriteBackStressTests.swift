/// Random sequences of writes, rewrites, unlinks and renames (done the way the facade will do
/// them) against a Dropbox that fails often, before and after commits land: once drained, the
/// account must hold exactly the local state: no lost file, no stale version, no resurrected
/// file, no conflicted copy.
import Foundation
import Synchronization
import Testing
@testable import VFSCache

@Suite(.serialized, .timeLimit(.minutes(2))) struct WriteBackStressTests {
    @Test(arguments: (UInt64(1)...8).map { $0 })
    func randomOperationsOnAFlakyRemoteConvergeToTheLocalState(seed: UInt64) throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let dice = Dice(seed: seed)
        let uploadCalls: Set<String> = ["upload", "startSession", "appendSession", "finishBatch"]
        fixture.probe.failBefore { operation, _ in uploadCalls.contains(operation) && dice.roll(percent: 10) ? .unavailable("test: 503") : nil }
        fixture.probe.failAfter { operation, _ in uploadCalls.contains(operation) && dice.roll(percent: 10) ? .unavailable("test: reply lost") : nil }
        let engine = try fixture.engine { $0.gatherDelay = 0.01; $0.maxGatherTime = 0.1 }
        defer { engine.shutdown(drainUntil: nil) }
        let workload = RandomWorkload(memory: fixture.memory, seed: seed)
        for step in 0..<300 { try workload.step(engine, step: step) }
        fixture.probe.failBefore { _, _ in nil }
        fixture.probe.failAfter { _, _ in nil }
        let left = engine.waitForAll(deadline: Date().addingTimeInterval(60))
        #expect(left.isEmpty, "left: \(left)")
        workload.expectRemoteMatchesModel("seed \(seed)")
        #expect(engine.status().conflicts.isEmpty)
    }

    /// The same workload, with the engine "killed" at random moments (uploads frozen mid-flight,
    /// no journal write after the kill) and a new engine opened on the same cache directory each
    /// time: whatever returned before a kill must reach Dropbox.
    @Test(arguments: (UInt64(1)...8).map { $0 })
    func randomOperationsWithRepeatedCrashesLoseNothing(seed: UInt64) throws {
        let fixture = WriteBackFixture(); defer { fixture.remove() }
        let workload = RandomWorkload(memory: fixture.memory, seed: seed)
        let dice = Dice(seed: seed &+ 7)
        var step = 0
        for _ in 0..<5 {
            let probe = ProbeRemote(fixture.memory)
            probe.failAfter { operation, _ in operation != "metadata" && dice.roll(percent: 5) ? .unavailable("test: reply lost") : nil }
            let engine = try fixture.engine(remote: probe) { $0.gatherDelay = 0.01; $0.maxGatherTime = 0.1 }
            for _ in 0..<40 { try workload.step(engine, step: step); step += 1 }
            Thread.sleep(forTimeInterval: Double(dice.below(30)) / 1000)
            probe.freezeNow()          // the requests in flight now never return...
            engine.stopAbruptly()      // ...and the process dies
            probe.kill()
        }
        let engine = try fixture.engine(remote: fixture.memory)
        defer { engine.shutdown(drainUntil: nil) }
        let left = engine.waitForAll(deadline: Date().addingTimeInterval(60))
        #expect(left.isEmpty, "left: \(left)")
        workload.expectRemoteMatchesModel("seed \(seed) with crashes")
        #expect(engine.status().conflicts.isEmpty)
        #expect(try fixture.journalRows() == 0)
        #expect(eventually { fixture.stagingNames().isEmpty })   // once the commit events were handled
    }
}

/// Random writes, rewrites, unlinks and renames over a few names, applied to an engine the way
/// the facade will (remote side effects of unlink/rename done directly on the account), with a
/// model of what the local tree holds.
final class RandomWorkload {
    let memory: InMemoryRemote
    let random: Dice
    let names = ["/a.txt", "/B.txt", "/c.bin", "/d/e.txt", "/d/F.txt", "/g.md"]
    /// By lowercased path: display path and content.
    var model: [String: (path: String, data: [UInt8])] = [:]

    init(memory: InMemoryRemote, seed: UInt64) { self.memory = memory; random = Dice(seed: seed &+ 100) }

    func step(_ engine: WriteBackEngine, step: Int) throws {
        let memory = self.memory
        let name = names[random.below(names.count)]
        let key = name.lowercased()
        switch random.below(10) {
        case 0...4:
            let data = random.below(40) == 0 ? pseudoRandomBytes(9 << 20, seed: UInt64(step)) : bytes("step \(step)")
            let path = model[key]?.path ?? name
            let base: WriteBase = ((try? memory.metadata(path: path)) ?? nil)?.rev.map { .revision($0) } ?? .newFile
            let file = try engine.beginWrite(path: path, base: base)
            try file.truncate(to: 0)
            try file.write(at: 0, data)
            try engine.close(path: path)
            model[key] = (path, data)
        case 5, 6:
            guard let existing = model[key] else { return }
            try engine.remove(path: existing.path) {
                if (try? memory.metadata(path: existing.path)) != nil { memory.externalDelete(existing.path) }
            }
            model[key] = nil
        case 7, 8:
            guard let existing = model[key] else { return }
            let target = names[random.below(names.count)]
            guard target.lowercased() != key else { return }
            try engine.rename(from: existing.path, to: target) { () throws(Errno) -> [String: WriteBase] in
                if (try? memory.metadata(path: target)) != nil { memory.externalDelete(target) }
                guard (try? memory.metadata(path: existing.path)) != nil else { return [:] }
                do throws(RemoteError) {
                    let moved = try memory.move(from: existing.path, to: target)
                    return [target: .revision(moved.rev!)]
                } catch { throw Errno(error) }
            }
            model[target.lowercased()] = (target, existing.data)
            model[key] = nil
        default:
            Thread.sleep(forTimeInterval: Double(random.below(20)) / 1000)
        }
    }

    func expectRemoteMatchesModel(_ context: String) {
        let remoteFiles = memory.allPaths().filter { memory.content($0) != nil }
        #expect(remoteFiles == model.keys.sorted(), "\(context)")
        for (key, entry) in model { #expect(memory.content(key) == entry.data, "\(key), \(context)") }
    }
}

/// A seeded, thread-safe xorshift generator for reproducible random choices.
final class Dice: Sendable {
    private let state: Mutex<UInt64>
    init(seed: UInt64) { state = Mutex(seed &* 0x9E37_79B9_7F4A_7C15 | 1) }
    func next() -> UInt64 {
        state.withLock { value in
            value ^= value << 13; value ^= value >> 7; value ^= value << 17
            return value
        }
    }
    func below(_ bound: Int) -> Int { Int(next() % UInt64(bound)) }
    func roll(percent: Int) -> Bool { below(100) < percent }
}
