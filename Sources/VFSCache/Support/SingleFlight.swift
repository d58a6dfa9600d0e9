/// `SingleFlight`: concurrent callers asking for the same key share one execution of the work
/// (one download of a block, one listing of a folder). The first caller runs it on its own
/// thread; the others block until it finishes, or until their deadline passes, so a stuck
/// fetch can never hang every reader of a block forever.
import Foundation

final class SingleFlight<Key: Hashable & Sendable, Value: Sendable>: @unchecked Sendable {
    // @unchecked: `flights` is only touched with `lock` held; a Flight's `result` only with its
    // `done` condition locked.
    fileprivate final class Flight: @unchecked Sendable {
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
        return try execute(Claim(key: key, flight: flight), work)
    }

    /// Waits for the run under way for `key` and returns its value; nil (at once) if none is.
    func join(_ key: Key, deadline: Date = .distantFuture) throws(Errno) -> Value? {
        lock.lock()
        guard let flight = flights[key] else { lock.unlock(); return nil }
        lock.unlock()
        return try wait(for: flight, until: deadline)
    }

    func isRunning(_ key: Key) -> Bool {
        lock.lock(); defer { lock.unlock() }
        return flights[key] != nil
    }

    /// A run registered with `claim` and ended with `finish`: for work that serves several keys
    /// at once (one download for a span of blocks), finishing each key as its value is ready.
    struct Claim: @unchecked Sendable {
        let key: Key
        fileprivate let flight: Flight
    }

    /// Registers a run for `key` if nothing is under way for it (nil otherwise: background work
    /// must not park a thread behind another fetch). Callers that ask for the key meanwhile wait
    /// for `finish`, which the claimer must call exactly once.
    func claim(_ key: Key) -> Claim? {
        lock.lock(); defer { lock.unlock() }
        guard flights[key] == nil else { return nil }
        let flight = Flight()
        flights[key] = flight
        return Claim(key: key, flight: flight)
    }

    /// Ends a claimed run, handing `result` to everyone waiting for it.
    func finish(_ claim: Claim, _ result: Result<Value, Errno>) {
        lock.lock()
        flights[claim.key] = nil
        lock.unlock()
        claim.flight.done.lock()
        claim.flight.result = result
        claim.flight.done.broadcast()
        claim.flight.done.unlock()
    }

    private func execute(_ claim: Claim, _ work: () throws(Errno) -> Value) throws(Errno) -> Value {
        let result: Result<Value, Errno>
        do throws(Errno) { result = .success(try work()) } catch { result = .failure(error) }
        finish(claim, result)
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
