/// `RequestPacer`: one client's request rate, adapted to Dropbox's 429s, shared by every thread.
///
/// Retrying each 429 on its own is not enough: when a dozen upload threads hit the limit they all
/// sleep the same `retry_after` and come back together into the same wall (issue 13 measured 835
/// 429s for ~800 useful requests under a 5 req/s limit). So the client as a whole slows down, the
/// way TCP does (AIMD) and rclone's pacer does for Dropbox:
///   - a 429 pauses every request of the client until its `retry_after` has passed (jittered, so
///     the threads do not restart at one instant), and doubles the spacing between request starts
///     (from `initialInterval`; at most once per `retry_after`, so a volley of 429s from requests
///     already in flight counts once);
///   - each success speeds up again by a fixed step in requests per second (additive increase),
///     until the spacing falls under `minimumInterval` and pacing stops altogether.
/// Without a 429, a request passes at once (one lock, no wait).
///
/// Pure logic over an injected clock, so its arithmetic is unit-tested (RequestPacerTests); the
/// waiting happens in `DropboxClient.withRetries`.
import Foundation
import Synchronization

public final class RequestPacer: Sendable {
    public struct Settings: Sendable {
        /// Spacing after the first 429 (seconds between request starts).
        public var initialInterval: Double = 0.05
        /// Longest spacing (a request every this many seconds at worst).
        public var maximumInterval: Double = 5
        /// Below this spacing pacing stops.
        public var minimumInterval: Double = 0.005
        /// Requests per second regained per successful request.
        public var rateStep: Double = 0.1
        /// A pause lasts `retry_after` times uniform(1, 1 + pauseJitter).
        public var pauseJitter: Double = 0.25
        public init() {}
    }

    struct State {
        var interval: Double = 0
        var nextStart: Double = 0
        var pausedUntil: Double = 0
        var lastSlowdown: Double = -.infinity
    }

    let settings: Settings
    private let state = Mutex(State())
    private let now: @Sendable () -> Double
    private let random: @Sendable () -> Double

    public init(settings: Settings = Settings(), now: @escaping @Sendable () -> Double = { ProcessInfo.processInfo.systemUptime },
                random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) }) {
        self.settings = settings; self.now = now; self.random = random
    }

    /// Takes the next start slot: returns how long to wait before sending. A wait over `limit`
    /// takes no slot and returns nil (the caller gives up rather than wait that long).
    public func reserve(limit: Double = .infinity) -> Double? {
        state.withLock { s in
            let t = now()
            let start = max(t, s.nextStart, s.pausedUntil)
            guard start - t <= limit else { return nil }
            if s.interval > 0 { s.nextStart = start + s.interval }
            return start - t
        }
    }

    /// A 429 asking for `retryAfter` seconds. `slowDown` is false for write contention
    /// (too_many_write_operations), which says writes collide, not that we send too often: it
    /// pauses the client but leaves the rate alone.
    public func rateLimited(retryAfter: Double, slowDown: Bool = true) {
        state.withLock { s in
            let t = now()
            let wait = max(retryAfter, 0)
            s.pausedUntil = max(s.pausedUntil, t + wait * (1 + settings.pauseJitter * random()))
            guard slowDown, t - s.lastSlowdown >= wait else { return }
            s.lastSlowdown = t
            s.interval = min(settings.maximumInterval, s.interval == 0 ? settings.initialInterval : s.interval * 2)
        }
    }

    /// A request that was not rate limited.
    public func succeeded() {
        state.withLock { s in
            guard s.interval > 0 else { return }
            let faster = 1 / (1 / s.interval + settings.rateStep)
            s.interval = faster < settings.minimumInterval ? 0 : faster
        }
    }

    /// Seconds between request starts now (0: not pacing).
    public var interval: Double { state.withLock { $0.interval } }
}
