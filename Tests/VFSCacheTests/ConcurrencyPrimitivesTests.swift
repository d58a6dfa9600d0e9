/// `WorkerPool` and `SingleFlight` on their own: jobs run and then let go of what they captured
/// (the disk writer's jobs hold 4 MiB blocks), and joiners share one run or give up at their
/// deadline. And `Atomic<UInt64>.raise`/`lower` across the whole unsigned range.
import Foundation
import Synchronization
import Testing
@testable import VFSCache

@Suite struct ConcurrencyPrimitivesTests {
    private final class Payload: Sendable {}

    /// The standard library's `Atomic.min`/`max` compare `UInt64` as signed in this toolchain:
    /// `min(3)` of `UInt64.max` kept `UInt64.max`, which broke the staging file's lowest-change mark.
    @Test func atomicBoundsCompareTheWholeUnsignedRange() {
        let lowest = Atomic<UInt64>(.max)
        lowest.lower(to: 3)
        #expect(lowest.load(ordering: .relaxed) == 3)
        lowest.lower(to: 7)
        #expect(lowest.load(ordering: .relaxed) == 3)
        let highest = Atomic<UInt64>(0)
        highest.raise(to: UInt64(Int64.max) + 5)
        #expect(highest.load(ordering: .relaxed) == UInt64(Int64.max) + 5)
        highest.raise(to: 9)
        #expect(highest.load(ordering: .relaxed) == UInt64(Int64.max) + 5)
    }

    @Test func aPoolReleasesWhatFinishedJobsCaptured() {
        let pool = WorkerPool(name: "test-pool", threads: 2)
        defer { pool.stop() }
        weak var watched: Payload?
        let ran = Atomic<Int>(0)
        do {
            let payload = Payload()
            watched = payload
            for _ in 0..<10 { pool.submit { withExtendedLifetime(payload) { _ = ran.add(1, ordering: .relaxed) } } }
        }
        pool.waitUntilIdle()
        #expect(ran.load(ordering: .relaxed) == 10)
        #expect(watched == nil)
    }

    /// A new job wakes one worker, not all: jobs submitted from several threads while others
    /// wait for the pool to go idle must all run (a signal that reached a waiter instead of a
    /// worker would leave a job queued and the waiter waiting), and each job gets a thread of its
    /// own when threads are free (blocking jobs run side by side).
    @Test func everyJobRunsWhileOthersWaitForIdleAndFreeThreadsRunJobsSideBySide() {
        let pool = WorkerPool(name: "test-pool", threads: 4)
        defer { pool.stop() }
        let ran = Atomic<Int>(0)
        let submitters = (0..<3).map { _ in
            Thread {
                for _ in 0..<300 {
                    pool.submit { ran.add(1, ordering: .relaxed) }
                    if Bool.random() { pool.waitUntilIdle() }
                }
            }
        }
        submitters.forEach { $0.start() }
        let deadline = Date(timeIntervalSinceNow: 20)
        while ran.load(ordering: .relaxed) < 900 && Date() < deadline { pool.waitUntilIdle(); Thread.sleep(forTimeInterval: 0.001) }
        pool.waitUntilIdle()
        #expect(ran.load(ordering: .relaxed) == 900)

        // Four jobs that each wait for all four to have started finish only if four threads run them.
        let started = Atomic<Int>(0)
        let finished = Atomic<Int>(0)
        for _ in 0..<4 {
            pool.submit {
                started.add(1, ordering: .relaxed)
                let until = Date(timeIntervalSinceNow: 5)
                while started.load(ordering: .relaxed) < 4 && Date() < until { Thread.sleep(forTimeInterval: 0.001) }
                if started.load(ordering: .relaxed) == 4 { finished.add(1, ordering: .relaxed) }
            }
        }
        pool.waitUntilIdle()
        #expect(finished.load(ordering: .relaxed) == 4)
    }

    @Test func joinersShareOneRunAndGiveUpAtTheirDeadline() throws {
        let flights = SingleFlight<Int, Int>()
        let runs = Atomic<Int>(0)
        let results = Mutex<[Int]>([])
        let threads = (0..<4).map { _ in
            Thread {
                let value = try? flights.run(7) { () throws(Errno) -> Int in
                    runs.add(1, ordering: .relaxed)
                    Thread.sleep(forTimeInterval: 0.3)
                    return 42
                }
                results.withLock { $0.append(value ?? -1) }
            }
        }
        threads.forEach { $0.start() }
        Thread.sleep(forTimeInterval: 0.1)
        #expect(throws: Errno.timedOut) {
            try flights.run(7, deadline: Date(timeIntervalSinceNow: 0.05)) { () throws(Errno) -> Int in 0 }
        }
        while results.withLock({ $0.count }) < 4 { Thread.sleep(forTimeInterval: 0.01) }
        #expect(results.withLock { $0 } == [42, 42, 42, 42])
        #expect(runs.load(ordering: .relaxed) == 1)
        // Once finished, the next call runs again.
        #expect(try flights.run(7) { () throws(Errno) -> Int in 1 } == 1)
    }

    /// A claimed key (read-ahead's span of blocks) is finished later, by the claimer: callers
    /// meanwhile wait for that value, and nobody else can claim or run the key until then.
    @Test func aClaimedKeyIsFinishedByItsClaimerForEveryoneWaiting() throws {
        let flights = SingleFlight<Int, Int>()
        let claim = try #require(flights.claim(5))
        #expect(flights.claim(5) == nil)
        #expect(flights.isRunning(5))
        let waited = Mutex<Int?>(nil)
        let thread = Thread {
            let value = try? flights.run(5) { () throws(Errno) -> Int in -1 }   // joins, never runs
            waited.withLock { $0 = value }
        }
        thread.start()
        Thread.sleep(forTimeInterval: 0.1)
        #expect(waited.withLock { $0 } == nil)
        flights.finish(claim, .success(9))
        let deadline = Date(timeIntervalSinceNow: 5)
        while waited.withLock({ $0 }) == nil && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        #expect(waited.withLock { $0 } == 9)
        #expect(!flights.isRunning(5))
        // A failed claim hands its error to a joiner the same way.
        let failing = try #require(flights.claim(6))
        let failed = Mutex<Errno?>(nil)
        let joiner = Thread {
            do throws(Errno) { _ = try flights.run(6) { () throws(Errno) -> Int in 0 } } catch { failed.withLock { $0 = error } }
        }
        joiner.start()
        Thread.sleep(forTimeInterval: 0.1)
        flights.finish(failing, .failure(.io))
        while failed.withLock({ $0 }) == nil && Date() < deadline { Thread.sleep(forTimeInterval: 0.01) }
        #expect(failed.withLock { $0 } == .io)
    }
}
