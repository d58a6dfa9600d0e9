/// `WorkerPool`: a fixed number of plain threads running queued jobs: the cache's own bounded
/// pool for network and disk work, so that blocking I/O never runs on Swift's cooperative pool
/// and never grows without bound. Jobs run in submission order.
///
/// A new job wakes one idle thread, not all of them: the fetch pools have 16 threads, and waking
/// every one for each job (they then queue on the lock to find nothing) cost a cold read's first
/// byte about a millisecond of futex traffic on 2 cores (docs/BENCHMARKS.md, "Time to first
/// byte at 0 ms"). Only a thread in `waitUntilIdle` (tests, shutdown) needs to hear of every
/// finished job; while one waits, the pool broadcasts as before, since it waits on the same
/// condition and a single signal could wake it instead of a worker.
import Foundation

final class WorkerPool: @unchecked Sendable {
    // @unchecked: `queue`, `head`, `busy`, `stopped` and `idleWaiters` are only touched with
    // `condition` locked.
    private let condition = NSCondition()
    /// Threads in `waitUntilIdle`.
    private var idleWaiters = 0
    /// Jobs; taken ones are set to nil at once, so nothing they capture (a 4 MiB block for the
    /// disk writer) outlives its run while it waits for the array to be compacted.
    private var queue: [(@Sendable () -> Void)?] = []
    private var head = 0
    private var busy = 0
    private var stopped = false

    init(name: String, threads: Int) {
        for number in 0..<max(1, threads) {
            let thread = Thread { [self] in self.work() }
            thread.name = "\(name)-\(number)"
            thread.start()
        }
    }

    /// Queues a job; false once the pool is stopped.
    @discardableResult
    func submit(_ job: @escaping @Sendable () -> Void) -> Bool {
        condition.lock(); defer { condition.unlock() }
        guard !stopped else { return false }
        queue.append(job)
        if idleWaiters > 0 { condition.broadcast() } else { condition.signal() }
        return true
    }

    /// Blocks until no job is queued or running (tests, orderly shutdown).
    func waitUntilIdle() {
        condition.lock(); defer { condition.unlock() }
        idleWaiters += 1
        defer { idleWaiters -= 1 }
        while head < queue.count || busy > 0 { condition.wait() }
    }

    /// Lets the threads finish the queued jobs, then exit. With `dropQueued`, jobs not yet started
    /// are discarded instead (the write-back engine at shutdown: what is left stays journaled and
    /// must not reach the network after the drain's deadline). Does not wait for running jobs.
    func stop(dropQueued: Bool = false) {
        condition.lock()
        stopped = true
        if dropQueued {
            queue = []
            head = 0
        }
        condition.broadcast()
        condition.unlock()
    }

    private func work() {
        while true {
            condition.lock()
            while head == queue.count && !stopped { condition.wait() }
            if head == queue.count {   // stopped and drained
                condition.unlock()
                return
            }
            var job = queue[head]
            queue[head] = nil
            head += 1
            if head >= 64 && head * 2 > queue.count {   // drop the consumed prefix now and then
                queue.removeFirst(head)
                head = 0
            }
            busy += 1
            condition.unlock()
            job?()
            job = nil   // let go of what it captured before reporting idle
            condition.lock()
            busy -= 1
            // Only a thread in waitUntilIdle waits for this; it shares the condition with the
            // idle workers, so it takes a broadcast to reach it.
            if idleWaiters > 0 && head == queue.count && busy == 0 { condition.broadcast() }
            condition.unlock()
        }
    }
}
