/// One daemon owns a cache directory: its upload journal, staging files and saved tree have one
/// writer, whatever the timing. The daemon holds an exclusive `flock` on `<cache dir>/daemon.lock`
/// from before anything in the directory is opened until the process exits, so through the drain
/// of its uploads after unmount too. A second daemon for the same directory (the same
/// `--cache-dir`, or two mountpoints of one account and root sharing the default one) is refused
/// before it mounts or writes anything, in one line naming the holder (CacheDirectoryHolder), or
/// waits for the lock with `--wait-for-cache`.
///
/// Why flock: the kernel releases it when the last descriptor of the open file goes, so a
/// crashed or killed daemon never leaves a stale lock; the pid, mountpoint, state and control
/// socket written into the file are only information for whoever is refused. The descriptor is
/// O_CLOEXEC (fusermount3, which libfuse runs for non-root mounts, must not inherit the lock),
/// and it is taken after the fork into the background, by the process that serves and drains.
/// The lock file is never removed: a new file at the same path would be a second lock.
import Foundation
import VFSCache

final class CacheDirectoryLock: Sendable {
    struct Refused: Error, CustomStringConvertible { var description: String }

    /// What the lock file says about its holder.
    struct Record: Codable, Sendable {
        var pid: Int32
        var mountpoint: String
        /// "starting", "mounted" or "unmounted" (then draining its uploads before it exits).
        var state: String
        /// The holder's control socket, once it has one (ControlPaths).
        var socket: String?
    }

    static let fileName = "daemon.lock"

    let directory: String
    let mountpoint: String
    /// Kept open until the process exits: closing it would release the lock.
    private let fd: Int32

    private init(directory: String, mountpoint: String, fd: Int32) {
        self.directory = directory; self.mountpoint = mountpoint; self.fd = fd
    }

    /// Takes the lock of `directory` (which exists) for a daemon about to mount `mountpoint`.
    /// Busy: refused with the holder's description, or with `wait`, waits, printing progress on
    /// stderr, as long as `stillWanted()` (false once the command that started us is gone).
    static func acquire(directory: String, mountpoint: String, wait: Bool,
                        stillWanted: () -> Bool = { true }) throws(Refused) -> CacheDirectoryLock {
        let path = directory + "/" + fileName
        // Opening an existing file with O_CREAT changes nothing in it: a refused daemon touches nothing.
        let fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0o600)
        guard fd >= 0 else {
            throw Refused(description: "cannot open the lock file \(path): \(String(cString: strerror(errno)))")
        }
        var progress: WaitProgress?
        while flock(fd, LOCK_EX | LOCK_NB) != 0 {
            let code = errno
            if code == EINTR { continue }
            guard code == EWOULDBLOCK else {
                close(fd)
                throw Refused(description: "cannot lock \(path): \(String(cString: strerror(code)))")
            }
            guard wait else {
                let holder = CacheDirectoryHolder.describe(readRecord(fd))
                close(fd)
                throw Refused(description: "the cache directory \(directory) is in use by \(holder.who): \(holder.advice), or use another --cache-dir")
            }
            guard stillWanted() else {
                close(fd)
                throw Refused(description: "stopped waiting for the cache directory \(directory)")
            }
            if progress == nil { progress = WaitProgress(directory: directory) }
            progress?.update { CacheDirectoryHolder.describe(readRecord(fd)).who }
            usleep(200_000)
        }
        progress?.finish()
        let lock = CacheDirectoryLock(directory: directory, mountpoint: mountpoint, fd: fd)
        lock.record(state: "starting")
        return lock
    }

    /// Rewrites what the lock file says about us (best effort: it is only information).
    func record(state: String, socket: String? = nil) {
        let record = Record(pid: getpid(), mountpoint: mountpoint, state: state, socket: socket)
        let encoder = JSONEncoder()
        encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
        guard let data = try? encoder.encode(record) else { return }
        let bytes = Array(data) + [UInt8(ascii: "\n")]
        // Write, then cut: a reader sees the old record, the new one, or (rarely) a mix it
        // cannot parse, and then reads again.
        _ = bytes.withUnsafeBytes { pwrite(fd, $0.baseAddress, $0.count, 0) }
        _ = ftruncate(fd, off_t(bytes.count))
    }

    /// The holder's record, or nil when the file holds none (yet) that parses.
    private static func readRecord(_ fd: Int32) -> Record? {
        for attempt in 0..<3 {
            if attempt > 0 { usleep(50_000) }
            var buffer = [UInt8](repeating: 0, count: 64 << 10)
            let n = buffer.withUnsafeMutableBytes { pread(fd, $0.baseAddress, $0.count, 0) }
            if n > 0, let record = try? JSONDecoder().decode(Record.self, from: Data(buffer[0..<n])) { return record }
        }
        return nil
    }

    /// The "waiting for the cache directory" line: rewritten in place on a terminal, else a new
    /// line when what the holder does changes, at most every 10 s.
    private struct WaitProgress {
        let directory: String
        let started = Date()
        let terminal = isatty(STDERR_FILENO) == 1
        var lastAsked = Date.distantPast
        var lastPrinted = Date.distantPast
        var lastText = ""

        init(directory: String) { self.directory = directory }

        mutating func update(_ describe: () -> String) {
            let now = Date()
            guard now.timeIntervalSince(lastAsked) >= 2 else { return }
            lastAsked = now
            let who = describe()
            let waited = Int(now.timeIntervalSince(started))
            let text = "dbxfs: waiting for the cache directory \(directory): \(who)"
            if terminal {
                write("\r\u{1B}[K\(text) (\(waited) s)")
            } else if text != lastText && now.timeIntervalSince(lastPrinted) >= 10 {
                write("\(text) (waited \(waited) s)\n")
                lastPrinted = now
            }
            lastText = text
        }

        func finish() {
            write("\(terminal ? "\r\u{1B}[K" : "")dbxfs: the cache directory \(directory) is free now; mounting\n")
        }

        private func write(_ text: String) { StandardError.write(text) }
    }
}
