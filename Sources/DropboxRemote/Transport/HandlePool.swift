/// The idle curl easy handles of one transport, and the warm-ups on their way.
///
/// Each idle handle remembers the origins (scheme, host, port) it has connections to, and a call
/// takes the newest idle handle with a connection to its own origin: a download then finds the
/// handle that last spoke to content.dropboxapi.com rather than one that only knows
/// api.dropboxapi.com (a new connection: TCP and TLS handshakes, two round trips).
///
/// A call to an origin with no such handle but with a warm-up in flight (ConnectionWarmer.swift)
/// waits for that warm-up, a few seconds at most, instead of opening a connection of its own (as
/// many calls as there are warm-ups: the rest of a burst open their own at once):
/// the warm-up started earlier, so its connection is ready sooner than a new one would be. This
/// is what makes a mount's first read right after it comes up (at WAN latency, while the warm-up
/// of the content host is still under way) pay one round trip, not three.
import CCurlShim
import Foundation

/// Raw pointers to curl objects. Safe to send: a handle is used by one thread at a time (the pool
/// hands it out exclusively), and the share handle does its own locking.
struct CurlPointer: @unchecked Sendable {
    let raw: UnsafeMutableRawPointer
}

final class HandlePool: @unchecked Sendable {
    // @unchecked: `idle` and `warming` are only touched with `condition` locked.
    private struct IdleHandle {
        let pointer: CurlPointer
        var origins: Set<String>
    }

    private let condition = NSCondition()
    private var idle: [IdleHandle] = []
    /// Warm-ups in flight per origin.
    private var warming: [String: Int] = [:]
    /// Calls waiting for those warm-ups per origin: no more than there are warm-ups, since each
    /// brings back one connection (the others of a burst open their own at once).
    private var waiting: [String: Int] = [:]
    private let capacity: Int

    /// At most `capacity` idle handles are kept; the others are cleaned up on check-in.
    init(capacity: Int) { self.capacity = capacity }

    deinit {
        for handle in idle { curl_easy_cleanup(handle.pointer.raw) }
    }

    /// The newest idle handle with a connection to `origin`; else, until `deadline`, the one a
    /// warm-up of `origin` in flight brings back; else the newest idle handle, else a new one.
    /// With the origins it has connections to. `fresh`: a new handle (a warm-up that opens one
    /// more connection; an idle handle would be busy for the warm-up's three round trips, and a
    /// call that needed its connection would open its own meanwhile).
    func checkout(for origin: String, waitingForWarmUpUntil deadline: Date?, fresh: Bool = false) -> (CurlPointer, Set<String>) {
        condition.lock()
        var found: IdleHandle?
        var waited = false
        while !fresh {
            if let index = idle.lastIndex(where: { $0.origins.contains(origin) }) { found = idle.remove(at: index); break }
            let waitingNow = waiting[origin, default: 0] - (waited ? 1 : 0)
            guard let deadline, warming[origin, default: 0] > waitingNow else { found = idle.popLast(); break }
            if !waited { waiting[origin, default: 0] += 1; waited = true }
            guard condition.wait(until: deadline) else { found = idle.popLast(); break }
        }
        if waited {
            waiting[origin, default: 1] -= 1
            if waiting[origin] == 0 { waiting[origin] = nil }
        }
        condition.unlock()
        if let found { return (found.pointer, found.origins) }
        guard let raw = curl_easy_init() else { fatalError("curl_easy_init failed (out of memory)") }
        return (CurlPointer(raw: raw), [])
    }

    /// Puts a handle back with the origins it now has connections to; `endingWarmUpOf` names the
    /// origin whose warm-up this handle ran (see `beginWarmUp`).
    func checkin(_ handle: CurlPointer, origins: Set<String>, endingWarmUpOf warmed: String? = nil) {
        condition.lock()
        let kept = idle.count < capacity
        if kept { idle.append(IdleHandle(pointer: handle, origins: origins)) }
        if let warmed {
            warming[warmed, default: 1] -= 1
            if warming[warmed] == 0 { warming[warmed] = nil }
        }
        condition.broadcast()
        condition.unlock()
        if !kept { curl_easy_cleanup(handle.raw) }
    }

    /// Notes a warm-up of `origin` in flight, until its handle is checked in.
    func beginWarmUp(_ origin: String) {
        condition.lock()
        warming[origin, default: 0] += 1
        condition.unlock()
    }

    /// Idle handles with a connection to `origin`.
    func idleConnections(to origin: String) -> Int {
        condition.lock()
        defer { condition.unlock() }
        return idle.count { $0.origins.contains(origin) }
    }

    /// Warm-ups of `origin` in flight (for tests).
    func warmUpsInFlight(_ origin: String) -> Int {
        condition.lock()
        defer { condition.unlock() }
        return warming[origin, default: 0]
    }
}
