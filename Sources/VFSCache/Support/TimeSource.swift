/// `TimeSource`: where the cache reads the time for its TTLs. Production uses a monotonic clock
/// (so a wall-clock jump neither expires nor freezes the cache); tests inject a manual clock.
import Foundation

public struct TimeSource: Sendable {
    /// Seconds since an arbitrary origin; only differences are meaningful.
    public let now: @Sendable () -> Double

    public init(now: @escaping @Sendable () -> Double) { self.now = now }

    public static let monotonic = TimeSource { ProcessInfo.processInfo.systemUptime }
}
