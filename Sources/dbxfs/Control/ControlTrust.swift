/// When `dbxfs status` and `dbxfs sync` believe what a control socket says. The daemon's side is
/// private already (a 0700 runtime directory it refuses to use when it is someone else's, a 0600
/// socket, peers of another uid refused), but the client reads sockets from wherever
/// `$XDG_RUNTIME_DIR` points, and a socket another local user planted there could make `sync`
/// report "Everything written ... is on Dropbox" for files that are not (issue 14). So the client
/// checks, in order:
///
/// 1. before connecting: the path is a socket, and its file belongs to the user;
/// 2. once connected: the process answering runs as the user (SO_PEERCRED, recorded by the kernel
///    at connect time, so the peer cannot claim it);
/// 3. the answer: it names the daemon's pid, which must be the peer's, so a stray process cannot
///    pass itself off as the daemon it points at (answers without a pid, from daemons older than
///    2026-12-01, must come from an executable named dbxfs).
///
/// A process of the same user can do anything the user can (and read the daemon's memory), so
/// past the uid this is about not being fooled by accident, not about a defence against oneself.
import Foundation

/// An answer on the control socket that says which daemon sent it.
protocol ControlAnswer {
    /// The pid of the daemon that answered, nil when its version did not say.
    var daemonPID: Int32? { get }
}

extension MountStatusReport: ControlAnswer {
    var daemonPID: Int32? { pid }
}

extension SyncReport: ControlAnswer {
    var daemonPID: Int32? { pid }
}

extension MetricsReply: ControlAnswer {
    var daemonPID: Int32? { pid }
}

enum ControlTrust {
    static func checkSocketFile(_ socket: String) throws(ControlClient.Failure) {
        var st = stat()
        // A missing path is left to connect(), which reports it as "not running".
        guard lstat(socket, &st) == 0 else { return }
        guard st.st_mode & S_IFMT == S_IFSOCK else {
            throw ControlClient.Failure(description: "not trusting \(socket): it is not a socket", untrusted: true)
        }
        guard st.st_uid == geteuid() else {
            throw ControlClient.Failure(description: "not trusting \(socket): the socket belongs to uid \(st.st_uid), not to you (uid \(geteuid())); another user may have planted it", untrusted: true)
        }
    }

    static func checkPeer(_ fd: Int32, socket: String) throws(ControlClient.Failure) -> UnixSocket.Peer {
        guard let peer = UnixSocket.peer(fd) else {
            throw ControlClient.Failure(description: "not trusting \(socket): cannot tell who answers there (SO_PEERCRED: \(String(cString: strerror(errno))))", untrusted: true)
        }
        guard peer.uid == geteuid() else {
            throw ControlClient.Failure(description: "not trusting \(socket): the process answering there (pid \(peer.pid)) runs as uid \(peer.uid), not as you (uid \(geteuid()))", untrusted: true)
        }
        return peer
    }

    static func checkAnswer(_ answer: some ControlAnswer, peer: UnixSocket.Peer, socket: String) throws(ControlClient.Failure) {
        if let claimed = answer.daemonPID {
            guard claimed == peer.pid else {
                throw ControlClient.Failure(description: "not trusting \(socket): the answer claims to come from dbxfs pid \(claimed), but pid \(peer.pid) sent it", untrusted: true)
            }
            return
        }
        let executable = executableName(of: peer.pid)
        guard executable?.hasPrefix("dbxfs") == true else {
            throw ControlClient.Failure(description: "not trusting \(socket): pid \(peer.pid) (\(executable ?? "unknown executable")) is not a dbxfs daemon", untrusted: true)
        }
    }

    /// The file name of the process's executable ("dbxfs"), without the " (deleted)" the kernel
    /// adds once the binary was replaced (an upgrade while the daemon runs).
    private static func executableName(of pid: pid_t) -> String? {
        guard let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/\(pid)/exe") else { return nil }
        var name = (target as NSString).lastPathComponent
        if name.hasSuffix(" (deleted)") { name.removeLast(" (deleted)".count) }
        return name
    }
}
