/// A tiny logger private to the write-back engine, until the module has a shared one: lines go to
/// stderr by default, or to a sink the daemon (or a test) installs with `WriteBackLog.setSink`.
import Foundation
import Synchronization

enum WriteBackLog {
    enum Level: String, Sendable { case debug, info, warning, error }

    private static let sink = Mutex<(@Sendable (Level, String) -> Void)?>(nil)

    /// Replaces where log lines go (nil = stderr).
    static func setSink(_ newSink: (@Sendable (Level, String) -> Void)?) { sink.withLock { $0 = newSink } }

    static func debug(_ message: @autoclosure () -> String) {
        if ProcessInfo.processInfo.environment["DBXFS_DEBUG"] != nil { emit(.debug, message()) }
    }
    static func info(_ message: String) { emit(.info, message) }
    static func warning(_ message: String) { emit(.warning, message) }
    static func error(_ message: String) { emit(.error, message) }

    private static func emit(_ level: Level, _ message: String) {
        if let custom = sink.withLock({ $0 }) { custom(level, message); return }
        FileHandle.standardError.write(Data("dbxfs writeback \(level.rawValue): \(message)\n".utf8))
    }
}
