/// `WorkerPool` and `SingleFlight` on their own: jobs run and then let go of what they captured
/// (the disk writer's jobs hold 4 MiB blocks), and joiners share one run or give up at their
/// deadline.
import Foundation
import Synchronization
import Testing
@testable import VFSCache

@Suite struct ConcurrencyPrimitivesTests {
    private final class Payload: Sendable {}

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
        #expect(flights.runIfIdle(7) { () throws(Errno) -> Int in 2 })
    }
}
