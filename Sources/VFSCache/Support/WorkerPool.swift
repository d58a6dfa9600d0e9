/// `WorkerPool`: a fixed number of plain threads running queued jobs: the cache's own bounded
/// pool for network and disk work, so that blocking I/O never runs on Swift's cooperative pool
/// and never grows without bound. Jobs run in submission order.
import Foundation

final class WorkerPool: @unchecked Sendable {
    // @unchecked: `queue`, `head`, `busy` and `stopped` are only touched with `condition` locked.
    private let condition = NSCondition()
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
        condition.broadcast()   // not signal: `waitUntilIdle` waits on the same condition
        return true
    }

    /// Blocks until no job is queued or running (tests, orderly shutdown).
    func waitUntilIdle() {
        condition.lock(); defer { condition.unlock() }
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
            condition.broadcast()
            condition.unlock()
        }
    }
}
