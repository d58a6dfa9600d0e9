/// `UploadWorkerPool`: a fixed set of plain threads running queued work items in FIFO order. The
/// write-back engine's transfers block on the network (RemoteStore calls are synchronous), so they
/// run here and never on Swift's cooperative pool, which must not be blocked.
import Foundation

final class UploadWorkerPool: @unchecked Sendable {
    // @unchecked: `queue` and `stopping` are only touched with `condition` held.
    private let condition = NSCondition()
    private var queue: [@Sendable () -> Void] = []
    private var head = 0
    private var stopping = false
    private var running = 0

    init(name: String, threads: Int) {
        for index in 0..<max(1, threads) {
            let thread = Thread { [self] in self.workLoop() }
            thread.name = "\(name)-\(index)"
            thread.stackSize = 1 << 20
            running += 1
            thread.start()
        }
    }

    func submit(_ work: @escaping @Sendable () -> Void) {
        condition.lock()
        queue.append(work)
        condition.signal()
        condition.unlock()
    }

    /// Drops queued work and lets every thread exit after its current item; does not wait.
    func stop() {
        condition.lock()
        stopping = true
        queue = []; head = 0
        condition.broadcast()
        condition.unlock()
    }

    private func workLoop() {
        while true {
            condition.lock()
            while head == queue.count && !stopping { condition.wait() }
            if stopping { running -= 1; condition.unlock(); return }
            let work = queue[head]
            head += 1
            if head > 1024 && head * 2 > queue.count { queue.removeFirst(head); head = 0 }
            condition.unlock()
            work()
        }
    }
}
