/// The commands' side of the control channel: finds the socket of a mount (from its mountpoint,
/// or all of them) and asks it for status or a sync, believing only the user's own daemon
/// (ControlTrust).
import Foundation

enum ControlClient {
    struct Failure: Error, CustomStringConvertible {
        var description: String
        /// True when there is simply no live dbxfs mount there (exit status 3).
        var notMounted = false

        /// A socket or an answer ControlTrust refused (exit status 1: something is there, and it
        /// is not the user's daemon).
        var untrusted = false

        /// The daemon's own error sentence, when it answered with one.
        var answer: String? = nil
    }

    /// The socket of the dbxfs mount that `path` is (or is inside), by walking up from the
    /// resolved path until a mountpoint with a socket is found: the socket of the mount on top
    /// there (ControlPaths), so never that of a daemon whose mount was lazily unmounted.
    static func socket(forPath path: String, paths: XDGPaths = XDGPaths()) throws(Failure) -> (mountpoint: String, socket: String) {
        guard let absolute = ControlPaths.resolve(path) else {
            let reason = errno == ENOTCONN ? "is a stale FUSE mount (the daemon died; run: fusermount3 -u \(path))"
                : "does not exist"
            throw Failure(description: "\(path) \(reason)", notMounted: true)
        }
        let mounts = MountTable.entries()
        var candidate = absolute
        while true {
            if let mount = mounts.last(where: { $0.mountPoint == candidate }) {
                let socket = ControlPaths.socketPath(forMountpoint: candidate, device: mount.device, paths: paths)
                // A daemon creates its socket right after its mount appears: allow it a moment.
                let patience = mount.fsType == "fuse.dbxfs" ? Date().addingTimeInterval(3) : Date()
                repeat {
                    if FileManager.default.fileExists(atPath: socket) { return (candidate, socket) }
                    if Date() < patience { Thread.sleep(forTimeInterval: 0.05) }
                } while Date() < patience
            }
            if candidate == "/" { break }
            candidate = (candidate as NSString).deletingLastPathComponent
            if candidate.isEmpty { candidate = "/" }
        }
        throw Failure(description: "no dbxfs mount at \(absolute)", notMounted: true)
    }

    static func request<T: Decodable & ControlAnswer>(_ request: ControlRequest, socket: String, timeout: TimeInterval,
                                                      as type: T.Type) throws(Failure) -> T {
        let (fd, peer) = try connect(socket: socket, timeout: timeout)
        defer { close(fd) }
        let line: Data
        do {
            let encoded = try ReportCoding.encoder().encode(request)
            try UnixSocket.writeAll(fd, encoded + Data("\n".utf8))
            line = try UnixSocket.readLine(fd, limit: 64 << 20)
        } catch let error as UnixSocket.Failure {
            throw Failure(description: "talking to the mount: \(error.description)")
        } catch {
            throw Failure(description: "talking to the mount: \(error)")
        }
        return try answer(line, as: T.self, peer: peer, socket: socket)
    }

    /// The answer line decoded as `T` (from the daemon ControlTrust believes), or its error.
    static func answer<T: Decodable & ControlAnswer>(_ line: Data, as type: T.Type, peer: UnixSocket.Peer,
                                                     socket: String) throws(Failure) -> T {
        let decoder = ReportCoding.decoder()
        if let value = try? decoder.decode(T.self, from: line) {
            try ControlTrust.checkAnswer(value, peer: peer, socket: socket)
            return value
        }
        if let failure = try? decoder.decode(ControlErrorReply.self, from: line) {
            throw Failure(description: "the mount answered: \(failure.error)", answer: failure.error)
        }
        throw Failure(description: line.isEmpty ? "the mount closed the connection without answering" : "the mount answered something unreadable")
    }

    /// A connection to the socket, once ControlTrust believes it is the user's daemon's.
    static func connect(socket: String, timeout: TimeInterval) throws(Failure) -> (fd: Int32, peer: UnixSocket.Peer) {
        try ControlTrust.checkSocketFile(socket)
        let fd: Int32
        do { fd = try UnixSocket.connect(path: socket, timeout: timeout) } catch {
            let stale = error.code == ECONNREFUSED || error.code == ENOENT
            throw Failure(description: stale ? "the mount behind \(socket) is not running" : error.description, notMounted: stale)
        }
        do { return (fd, try ControlTrust.checkPeer(fd, socket: socket)) } catch {
            close(fd)
            throw error
        }
    }

    /// Status of every live mount with a socket; stale sockets (their daemon died) are removed,
    /// and sockets that are not the user's daemon's are skipped with a line on stderr.
    static func allStatuses(paths: XDGPaths = XDGPaths()) -> [MountStatusReport] {
        var reports: [MountStatusReport] = []
        for socket in ControlPaths.allSockets(paths: paths) {
            do {
                reports.append(try request(ControlRequest(command: "status"), socket: socket, timeout: 5, as: MountStatusReport.self))
            } catch {
                if error.notMounted { unlink(socket) }
                if error.untrusted { printError("skipped: \(error.description)") }
            }
        }
        return reports.sorted { $0.mountpoint < $1.mountpoint }
    }
}
