/// Detaching from the terminal without lying about the outcome: the command starts the daemon
/// (itself again, as the leader of a new session), then waits on a pipe until the daemon says
/// "mounted" or sends its one-line error. So `dbxfs MOUNTPOINT` returns 0 only once the mount is
/// live (printing nothing, or one line worth knowing, such as a mount made offline), and otherwise
/// prints the daemon's reason and exits 1. What the daemon logs before that goes to the log file,
/// never to the terminal (StartupLog).
///
/// Why a new process and not `fork()`: the Swift runtime caches each thread's id in a
/// thread-local and its locks record that id (priority-inheritance futexes). A forked child's
/// main thread keeps its parent's id, and a lock it then shares with another thread spins both
/// forever: a detached mount hung at start, two threads at 100 % CPU in `swift_once` inside
/// `FileHandle.write` (clean-clone CI run of faf7801, test_a_relative_log_file_is_written…). The
/// daemon finds the pipe's fd in `DBXFS_DAEMON_REPORT_FD`.
import CFuse
import Foundation

enum Daemon {
    /// The child's end of the pipe. Reporting closes it; the parent reads one message.
    final class Reporter {
        private var fd: Int32
        init(fd: Int32) { self.fd = fd }

        /// The mount is live; `note` is the one line the waiting command prints (nil: none).
        func succeeded(note: String? = nil) { send(note.map { "ok \($0)\n" } ?? "ok\n") }
        func failed(_ message: String) { send("error \(message)\n") }

        /// False once the parent is gone (Ctrl-C while it waits): the pipe's reading end is
        /// closed, which poll reports as POLLERR on ours. A long wait (--wait-for-cache) stops then.
        var parentWaits: Bool {
            guard fd >= 0 else { return false }
            var end = pollfd(fd: fd, events: 0, revents: 0)
            return !(poll(&end, 1, 0) == 1 && end.revents & Int16(POLLERR) != 0)
        }

        private func send(_ line: String) {
            guard fd >= 0 else { return }
            let bytes = Array(line.utf8)
            _ = bytes.withUnsafeBytes { Glibc.write(fd, $0.baseAddress, $0.count) }
            close(fd)
            fd = -1
        }
    }

    /// The environment variable that tells the daemon which fd reaches the waiting command.
    static let reportVariable = "DBXFS_DAEMON_REPORT_FD"

    /// In the command: starts the daemon and never returns (it exits with the daemon's verdict).
    /// In the daemon (started so): returns its reporter.
    static func detach() -> Reporter {
        if let text = getenv(reportVariable).map({ String(cString: $0) }) {
            // Started as the daemon: never start another one, whatever the value (a daemon that
            // took a bad value for "not started so" would start itself again, without end).
            unsetenv(reportVariable)
            guard let fd = Int32(text), fd > 2 else {
                printError("\(reportVariable)=\(text) is not a pipe from dbxfs; unset it and mount again")
                exit(1)
            }
            _ = fcntl(fd, F_SETFD, FD_CLOEXEC)   // not for what the daemon runs (fusermount3)
            return Reporter(fd: fd)
        }
        var fds: [Int32] = [0, 0]
        guard pipe(&fds) == 0 else {
            printError("cannot create a pipe: \(String(cString: strerror(errno)))")
            exit(1)
        }
        // Started with stdin or stdout closed, the pipe may take fd 0-2, which the daemon's
        // standard streams would reuse: its end goes above them.
        if fds[1] <= 2 {
            let moved = fcntl(fds[1], F_DUPFD, 3)
            if moved < 0 {
                printError("cannot create a pipe: \(String(cString: strerror(errno)))")
                exit(1)
            }
            close(fds[1])
            fds[1] = moved
        }
        let environment = ProcessInfo.processInfo.environment.filter { $0.key != reportVariable }
            .map { "\($0.key)=\($0.value)" } + ["\(reportVariable)=\(fds[1])"]
        var pid: pid_t = 0
        let result = withCStrings(CommandLine.arguments) { argv in
            withCStrings(environment) { envp in
                dbxfs_spawn_session(&pid, "/proc/self/exe", argv, envp, fds[0])
            }
        }
        if result != 0 {
            printError("cannot start the mount daemon: \(String(cString: strerror(result)))")
            exit(1)
        }
        close(fds[1])
        var message: [UInt8] = []
        var buffer = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = buffer.withUnsafeMutableBytes { read(fds[0], $0.baseAddress, $0.count) }
            if n > 0 { message += buffer[0..<n]; continue }
            if n < 0 && errno == EINTR { continue }
            break
        }
        let text = String(decoding: message, as: UTF8.self).trimmingCharacters(in: .newlines)
        if text == "ok" { exit(0) }
        if text.hasPrefix("ok ") {
            printError(String(text.dropFirst(3)))
            exit(0)
        }
        if text.hasPrefix("error ") {
            printError(String(text.dropFirst(6)))
        } else {
            // The child died without a word (crash): report its status.
            var status: Int32 = 0
            waitpid(pid, &status, 0)
            printError("the mount daemon exited before the mount was ready (status \(status))")
        }
        exit(1)
    }

    /// Points stdin/stdout at /dev/null and stderr at the log file, once the mount is live.
    static func redirectOutput(logFile: String?) {
        chdir("/")
        let null = open("/dev/null", O_RDWR)
        if null >= 0 { dup2(null, 0); dup2(null, 1) }
        if let logFile {
            let fd = open(logFile, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0o600)
            if fd >= 0 { dup2(fd, 2); close(fd) } else if null >= 0 { dup2(null, 2) }
        } else if null >= 0 {
            dup2(null, 2)
        }
        if null > 2 { close(null) }
    }
}

/// `body` gets `strings` as a NULL-terminated C array (argv, envp), valid during the call.
private func withCStrings<R>(_ strings: [String], _ body: (UnsafePointer<UnsafeMutablePointer<CChar>?>) -> R) -> R {
    let pointers = strings.map { strdup($0) } + [nil]
    defer { for pointer in pointers { free(pointer) } }
    return pointers.withUnsafeBufferPointer { body($0.baseAddress!) }
}
