/// The write-back engine's log: lines go to stderr by default, or to the module's `Logger` when
/// the engine is configured with one (`WriteBackConfiguration.logger`), so the daemon's level and
/// sink apply. One process has one engine, so the choice is process-wide.
import Foundation
import Synchronization

enum WriteBackLog {
    enum Level: String, Sendable { case debug, info, warning, error }

    private static let sink = Mutex<(@Sendable (Level, String) -> Void)?>(nil)

    /// Replaces where log lines go (nil = stderr).
    static func setSink(_ newSink: (@Sendable (Level, String) -> Void)?) { sink.withLock { $0 = newSink } }

    private static let logger = Mutex<Logger?>(nil)

    static func use(_ newLogger: Logger) { logger.withLock { $0 = newLogger } }

    static func debug(_ message: @autoclosure () -> String) {
        if let shared = logger.withLock({ $0 }) { shared.debug(message()); return }
        if ProcessInfo.processInfo.environment["DBXFS_DEBUG"] != nil { emit(.debug, message()) }
    }
    static func info(_ message: String) { emit(.info, message) }
    static func warning(_ message: String) { emit(.warning, message) }
    static func error(_ message: String) { emit(.error, message) }

    private static func emit(_ level: Level, _ message: String) {
        if let shared = logger.withLock({ $0 }) {
            switch level {
            case .debug: shared.debug(message)
            case .info: shared.info(message)
            case .warning: shared.warning(message)
            case .error: shared.error(message)
            }
            return
        }
        if let custom = sink.withLock({ $0 }) { custom(level, message); return }
        StandardError.write("dbxfs writeback \(level.rawValue): \(message)\n")
    }
}
