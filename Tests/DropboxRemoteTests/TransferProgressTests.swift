/// The progress one transfer reports, as pure logic: parallel appends share one box, and whoever
/// shows the figures (a progress bar, `dbxfs status`) must see them only grow.
import Foundation
import Synchronization
import Testing
@testable import DropboxRemote

@Suite struct TransferProgressTests {
    /// Two appenders report at once; the first is slow to hand its figure on (its callback is still
    /// running when the second one's larger figure arrives). The figures must still arrive in order.
    @Test func parallelReportersNeverReportAFigureSmallerThanOneAlreadyReported() {
        let firstIsReporting = DispatchSemaphore(value: 0)
        let seen = Mutex<[UInt64]>([])
        let box = MonotonicProgressBox({ done, _ in
            if done == 1 {
                firstIsReporting.signal()
                Thread.sleep(forTimeInterval: 0.2)
            }
            seen.withLock { $0.append(done) }
        }, total: 2)

        let group = DispatchGroup()
        group.enter()
        Thread { box.update(1); group.leave() }.start()
        firstIsReporting.wait()
        group.enter()
        Thread { box.update(2); group.leave() }.start()
        group.wait()

        #expect(seen.withLock { $0 } == [1, 2])
    }

    @Test func aFigureNotLargerThanTheLastIsNotReported() {
        let seen = Mutex<[UInt64]>([])
        let box = MonotonicProgressBox({ done, _ in seen.withLock { $0.append(done) } }, total: 10)
        for done: UInt64 in [3, 3, 2, 7, 5, 10] { box.update(done) }
        #expect(seen.withLock { $0 } == [3, 7, 10])
    }
}
