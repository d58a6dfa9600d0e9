/// When the daemon must be gone: set once, when it starts to stop (SIGTERM/SIGINT/SIGHUP or an
/// unmount ends the FUSE loop), to now + the drain bound. Everything that waits during the stop
/// waits until this one moment: FUSE requests still waiting for uploads (fsync, which libfuse's
/// loop must see return before it can end) and the upload drain after the loop. Without it, an
/// fsync waiting for an unreachable Dropbox kept a SIGTERM'd daemon alive for the fsync's hour.
import Foundation
import Synchronization

final class StopDeadline: Sendable {
    private let moment = Mutex<Date?>(nil)

    /// Starts the stop (the first call decides the moment); returns the deadline.
    @discardableResult
    func begin(drainSeconds: Double) -> Date {
        moment.withLock { moment in
            if let moment { return moment }
            let deadline = Date().addingTimeInterval(drainSeconds)
            moment = deadline
            return deadline
        }
    }

    var deadline: Date? { moment.withLock { $0 } }
}
