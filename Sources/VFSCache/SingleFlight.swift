/// `SingleFlight`: concurrent callers asking for the same key share one execution of the work
/// (one download of a block, one listing of a folder). The first caller runs it on its own
/// thread; the others block until it finishes, or until their deadline passes, so a stuck
/// fetch can never hang every reader of a block forever.
import Foundation

final class SingleFlight<Key: Hashable & Sendable, Value: Sendable>: @unchecked Sendable {
    // @unchecked: `flights` is only touched with `lock` held; a Flight's `result` only with its
    // `done` condition locked.
    private final class Flight: @unchecked Sendable {
        let done = NSCondition()
        var result: Result<Value, Errno>?
    }

    private let lock = NSLock()
    private var flights: [Key: Flight] = [:]

    /// Runs `work` for `key`, or joins the run already under way. A joiner gives up with
    /// ETIMEDOUT once `deadline` passes (the run itself continues).
    func run(_ key: Key, deadline: Date = .distantFuture, _ work: () throws(Errno) -> Value) throws(Errno) -> Value {
        lock.lock()
        if let flight = flights[key] {
            lock.unlock()
            return try wait(for: flight, until: deadline)
        }
        let flight = Flight()
        flights[key] = flight
        lock.unlock()
        return try execute(key, flight, work)
    }

    /// Runs `work` only if nothing is under way for `key`; returns false without waiting otherwise.
    /// For background prefetches, which must not park a worker thread behind another fetch.
    @discardableResult
    func runIfIdle(_ key: Key, _ work: () throws(Errno) -> Value) -> Bool {
        lock.lock()
        guard flights[key] == nil else { lock.unlock(); return false }
        let flight = Flight()
        flights[key] = flight
        lock.unlock()
        _ = try? execute(key, flight, work)
        return true
    }

    func isRunning(_ key: Key) -> Bool {
        lock.lock(); defer { lock.unlock() }
        return flights[key] != nil
    }

    private func execute(_ key: Key, _ flight: Flight, _ work: () throws(Errno) -> Value) throws(Errno) -> Value {
        let result: Result<Value, Errno>
        do throws(Errno) { result = .success(try work()) } catch { result = .failure(error) }
        lock.lock()
        flights[key] = nil
        lock.unlock()
        flight.done.lock()
        flight.result = result
        flight.done.broadcast()
        flight.done.unlock()
        return try result.get()
    }

    private func wait(for flight: Flight, until deadline: Date) throws(Errno) -> Value {
        flight.done.lock()
        defer { flight.done.unlock() }
        while flight.result == nil {
            if deadline == .distantFuture {
                flight.done.wait()   // Foundation on Linux traps converting distantFuture to a timespec
            } else if !flight.done.wait(until: deadline) && flight.result == nil {
                throw .timedOut
            }
        }
        return try flight.result!.get()
    }
}
