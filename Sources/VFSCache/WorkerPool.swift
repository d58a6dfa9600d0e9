/// `WorkerPool`: a fixed number of plain threads running queued jobs: the cache's own bounded
/// pool for network and disk work, so that blocking I/O never runs on Swift's cooperative pool
/// and never grows without bound. Jobs run in submission order.
import Foundation

final class WorkerPool: @unchecked Sendable {
    // @unchecked: `queue`, `head`, `busy` and `stopped` are only touched with `condition` locked.
    private let condition = NSCondition()
    private var queue: [@Sendable () -> Void] = []
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

    /// Lets the threads finish the queued jobs, then exit.
    func stop() {
        condition.lock()
        stopped = true
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
            let job = queue[head]
            head += 1
            if head > 1024 && head * 2 > queue.count {   // compact the consumed prefix
                queue.removeFirst(head)
                head = 0
            }
            busy += 1
            condition.unlock()
            job()
            condition.lock()
            busy -= 1
            condition.broadcast()
            condition.unlock()
        }
    }
}
