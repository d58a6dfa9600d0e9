/// The retry policy, in one place: which failures are retried, how long to wait, and when to give
/// up. It is pure (the clock, the sleeper and the random source are injected), so its logic is
/// unit-tested without a server; `DropboxClient.withRetries` is its only user.
///
///   429, and 409 too_many_write_operations
///                       wait at least `retry_after` (the server's value), longer after repeated
///                       429s, jittered: uniform(1, 1.5) · retry_after · 1.5^(n-1) (capped), up to
///                       `maxRateLimitWaits` times
///   5xx, transport      exponential backoff with full jitter: uniform(0, min(cap, base·2^n)),
///                       up to `maxAttempts` attempts in all
///   401 expired token   refresh (single flight, see TokenProvider), at most `maxTokenRefreshes`
///   anything else       fail at once
/// `maxTotalWait` bounds the sum of one call's waits: a call made for a caller who is waiting
/// (a FUSE request) gives up rather than wait longer; background work leaves it unbounded.
import Foundation
import Synchronization

public struct RetryPolicy: Sendable {
    /// Attempts in all for 5xx and transport failures (1 = no retry).
    public var maxAttempts: Int
    public var baseDelay: Double
    public var maxDelay: Double
    /// How many 429 answers one call absorbs before throwing `.rateLimited`.
    public var maxRateLimitWaits: Int
    /// Longest single wait for a 429, whatever `retry_after` says.
    public var maxRateLimitDelay: Double
    public var maxTokenRefreshes: Int
    /// The most one call may spend waiting, between attempts and for the pacer (nil: no bound).
    public var maxTotalWait: Double?
    /// Waits between attempts. Tests inject a recording sleeper to run without real delays.
    public var sleeper: any RetrySleeper
    /// A number in [0, 1) for the jitter.
    public var random: @Sendable () -> Double

    public init(maxAttempts: Int = 6, baseDelay: Double = 0.2, maxDelay: Double = 10, maxRateLimitWaits: Int = 20,
                maxRateLimitDelay: Double = 300, maxTokenRefreshes: Int = 2, maxTotalWait: Double? = nil,
                sleeper: any RetrySleeper = CancellableSleeper(),
                random: @escaping @Sendable () -> Double = { Double.random(in: 0..<1) }) {
        self.maxAttempts = maxAttempts; self.baseDelay = baseDelay; self.maxDelay = maxDelay
        self.maxRateLimitWaits = maxRateLimitWaits; self.maxRateLimitDelay = maxRateLimitDelay
        self.maxTokenRefreshes = maxTokenRefreshes; self.maxTotalWait = maxTotalWait
        self.sleeper = sleeper; self.random = random
    }

    /// The failures one call has met so far.
    public struct Tally: Sendable, Equatable {
        public var transientFailures = 0
        public var rateLimits = 0
        public var tokenRefreshes = 0
        public init() {}
    }

    public enum Decision: Sendable, Equatable {
        case retry(after: Double)
        case refreshToken
        case fail
    }

    /// What to do after `error`, given the tally *including* this error's predecessors (the
    /// tally is updated by the caller according to the decision: see `record`).
    public func decide(after error: DropboxError, tally: Tally) -> Decision {
        switch error {
        case .rateLimited(_, let retryAfter):
            guard tally.rateLimits < maxRateLimitWaits else { return .fail }
            return .retry(after: rateLimitDelay(retryAfter: retryAfter, waits: tally.rateLimits + 1))
        case .server, .transport:
            guard tally.transientFailures + 1 < maxAttempts else { return .fail }
            return .retry(after: backoff(failures: tally.transientFailures + 1))
        case .auth(.expiredAccessToken, _):
            return tally.tokenRefreshes < maxTokenRefreshes ? .refreshToken : .fail
        default:
            return .fail
        }
    }

    /// The wait after the n-th 429 of one call (n ≥ 1): never shorter than what the server asked
    /// (waking earlier only earns another 429), growing when 429s repeat, and jittered upwards so
    /// the threads that met the same limit do not all come back at the same instant.
    public func rateLimitDelay(retryAfter: Double, waits n: Int) -> Double {
        let asked = max(retryAfter, 0.1)
        let grown = asked * pow(1.5, Double(min(n - 1, 6)))
        return min(maxRateLimitDelay, grown * (1 + 0.5 * random()))
    }

    /// Full-jitter exponential backoff after the n-th failure (n ≥ 1).
    public func backoff(failures n: Int) -> Double {
        let ceiling = min(maxDelay, baseDelay * pow(2, Double(min(n - 1, 30))))
        return ceiling * random()
    }

    /// Counts `error` in the tally after deciding to retry it.
    public static func record(_ error: DropboxError, decision: Decision, in tally: inout Tally) {
        switch (error, decision) {
        case (.rateLimited, .retry): tally.rateLimits += 1
        case (_, .refreshToken): tally.tokenRefreshes += 1
        case (_, .retry): tally.transientFailures += 1
        default: break
        }
    }
}

/// Waits between attempts.
public protocol RetrySleeper: Sendable {
    /// Sleeps `seconds`, returning early (false) if `cancel` fires.
    func sleep(seconds: Double, cancel: CancelHandle?) -> Bool
}

/// Sleeps in short slices so that a cancel interrupts a long 429 wait promptly.
public struct CancellableSleeper: RetrySleeper {
    public init() {}
    public func sleep(seconds: Double, cancel: CancelHandle?) -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while true {
            if cancel?.isCancelled == true { return false }
            let left = deadline.timeIntervalSinceNow
            if left <= 0 { return true }
            Thread.sleep(forTimeInterval: min(left, 0.05))
        }
    }
}

/// Counters of what the retry machinery absorbed, for tests, benchmarks and `dbxfs --stats`.
public final class RetryStatistics: Sendable {
    private let counters = Mutex(Snapshot())

    public struct Snapshot: Sendable, Equatable {
        /// Every retried attempt, whatever the reason.
        public var retries = 0
        public var serverErrors = 0
        public var transportErrors = 0
        public var rateLimitWaits = 0
        public var tokenRefreshes = 0
        /// Appends that continued from the server's `correct_offset`.
        public var offsetCorrections = 0
        /// Downloads resumed mid-stream with a Range request.
        public var downloadResumes = 0
        /// Writes whose retry found the first attempt had already committed.
        public var ambiguousWritesResolved = 0
        public init() {}
    }

    public init() {}
    public var snapshot: Snapshot { counters.withLock { $0 } }
    public func reset() { counters.withLock { $0 = Snapshot() } }
    func update(_ change: (inout Snapshot) -> Void) { counters.withLock { change(&$0) } }

    func countRetry(of error: DropboxError) {
        update { s in
            s.retries += 1
            switch error {
            case .server: s.serverErrors += 1
            case .transport: s.transportErrors += 1
            case .rateLimited: s.rateLimitWaits += 1
            case .auth: s.tokenRefreshes += 1
            default: break
            }
        }
    }
}
