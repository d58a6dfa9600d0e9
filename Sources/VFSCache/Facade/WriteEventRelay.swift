/// `WriteEventRelay`: carries the write-back engine's events to the `VFS` that owns the engine.
/// The engine is built inside `VFS.init`, before `self` may be captured, so its event handler
/// goes through this relay; events that arrive before `connect` (uploads resumed at start-up)
/// are kept and delivered on connect, in order.
import Synchronization

final class WriteEventRelay: Sendable {
    private struct State {
        var target: (@Sendable (WriteBackEvent) -> Void)?
        var early: [WriteBackEvent] = []
    }
    private let state = Mutex(State())

    func deliver(_ event: WriteBackEvent) {
        let target: (@Sendable (WriteBackEvent) -> Void)? = state.withLock { state in
            if state.target == nil { state.early.append(event) }
            return state.target
        }
        target?(event)
    }

    func connect(_ target: @escaping @Sendable (WriteBackEvent) -> Void) {
        // Events are delivered on the engine's one serial queue, so none can slip between these.
        let early = state.withLock { state in
            state.target = target
            defer { state.early = [] }
            return state.early
        }
        for event in early { target(event) }
    }
}
