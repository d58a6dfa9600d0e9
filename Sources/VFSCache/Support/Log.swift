/// `Logger`: the cache layer's small logging facility. Messages go to stderr by default; tests
/// inject a sink to capture them, and the CLI sets the level (`-v`, `--debug`, ...).
import Foundation
#if canImport(Glibc)
import Glibc
#endif
import Synchronization

public enum LogLevel: Int, Sendable, Comparable, CaseIterable {
    case error = 0, warning, info, debug

    public static func < (lhs: LogLevel, rhs: LogLevel) -> Bool { lhs.rawValue < rhs.rawValue }

    public var label: String {
        switch self {
        case .error: "error"
        case .warning: "warning"
        case .info: "info"
        case .debug: "debug"
        }
    }
}

public final class Logger: Sendable {
    public typealias Sink = @Sendable (LogLevel, String) -> Void

    private struct State {
        var level: LogLevel
        var sink: Sink
    }
    private let state: Mutex<State>

    /// Writes "dbxfs: <level>: <message>" lines to stderr in one write each, so lines from
    /// concurrent threads never interleave.
    public static let standardErrorSink: Sink = { level, message in
        StandardError.write("dbxfs: \(level.label): \(message)\n")
    }

    public init(level: LogLevel = .warning, sink: @escaping Sink = Logger.standardErrorSink) {
        state = Mutex(State(level: level, sink: sink))
    }

    public var level: LogLevel { state.withLock { $0.level } }
    public func setLevel(_ level: LogLevel) { state.withLock { $0.level = level } }
    public func setSink(_ sink: @escaping Sink) { state.withLock { $0.sink = sink } }

    /// The message is only built when the level is enabled.
    public func log(_ level: LogLevel, _ message: @autoclosure () -> String) {
        let current = state.withLock { ($0.level, $0.sink) }
        guard level <= current.0 else { return }
        current.1(level, message())
    }

    public func error(_ message: @autoclosure () -> String) { log(.error, message()) }
    public func warning(_ message: @autoclosure () -> String) { log(.warning, message()) }
    public func info(_ message: @autoclosure () -> String) { log(.info, message()) }
    public func debug(_ message: @autoclosure () -> String) { log(.debug, message()) }
}

/// Standard error, written with write(2). Foundation's `FileHandle.write` traps when a write
/// fails (SIGILL), and a detached mount's stderr is a log file in its cache directory: a full
/// cache disk stopped the daemon at the line that would have said so
/// (Tests/cli/test_unwritable_log.py). A line that cannot be written is let go.
public enum StandardError {
    public static func write(_ text: String) { _ = writeAll(STDERR_FILENO, Array(text.utf8)) }
}

/// Writes all of `bytes` to `descriptor` with write(2), in one call normally (so lines from
/// concurrent threads do not interleave), retrying after EINTR. Returns the errno that stopped
/// it, or nil once everything is out.
public func writeAll(_ descriptor: Int32, _ bytes: [UInt8]) -> Int32? {
    var offset = 0
    while offset < bytes.count {
        let written = bytes.withUnsafeBytes { buffer in
            Glibc.write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
        }
        if written > 0 {
            offset += written
        } else if written < 0 && errno == EINTR {
            continue
        } else {
            return written < 0 ? errno : EIO
        }
    }
    return nil
}
