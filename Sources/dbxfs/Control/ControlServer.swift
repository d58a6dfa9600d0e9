/// The mount daemon's side of the status/sync channel: a Unix socket in the user's private
/// runtime directory (0700, socket 0600; see ControlPaths), one per mount. It is created right
/// after the mount (its name needs the mount's device number) and serves until the daemon has
/// finished its uploads after unmount, so a daemon that is still draining can say so. Each connection sends
/// one JSON request line and gets one JSON answer line (StatusReport.swift). Connections from
/// another uid are refused (SO_PEERCRED), in case the directory's mode was loosened.
///
/// One thread accepts; each connection is served on its own thread, because `sync` may wait
/// for minutes while `status` must keep answering.
import Foundation
import Synchronization
import VFSCache

final class ControlServer: Sendable {
    let socketPath: String
    let mountpoint: String
    private let source: MountStatusSource
    /// history, cat, restore, undelete, trash, share (nil: the mount answers that it has none).
    private let files: FileCommandService?
    /// `dbxfs status --prometheus` (nil: the mount keeps no metrics, `--no-metrics`).
    private let metrics: MountMetrics?
    private let listener: Int32
    private let stopped = Atomic<Bool>(false)
    private let logger: Logger

    /// Creates the socket and starts serving. A stale socket left by a crashed mount is replaced;
    /// a live one (another process answering there) is an error.
    init(mountpoint: String, device: String, source: MountStatusSource, files: FileCommandService? = nil,
         metrics: MountMetrics? = nil, logger: Logger, paths: XDGPaths = XDGPaths()) throws(UnixSocket.Failure) {
        self.mountpoint = mountpoint
        self.source = source
        self.files = files
        self.metrics = metrics
        self.logger = logger
        socketPath = ControlPaths.socketPath(forMountpoint: mountpoint, device: device, paths: paths)
        do throws(XDGPaths.PrivateDirectoryError) {
            try XDGPaths.makePrivateDirectory(ControlPaths.directory(paths: paths))
        } catch {
            throw UnixSocket.Failure(description: error.description)
        }
        if FileManager.default.fileExists(atPath: socketPath) {
            if let fd = try? UnixSocket.connect(path: socketPath, timeout: 1) {
                close(fd)
                throw UnixSocket.Failure(description: "another dbxfs already serves \(socketPath)")
            }
            unlink(socketPath)
        }
        listener = try UnixSocket.listen(path: socketPath)
        let thread = Thread { [self] in self.acceptLoop() }
        thread.name = "dbxfs-control"
        thread.start()
    }

    /// Stops accepting and removes the socket (the daemon is about to exit).
    func stop() {
        guard !stopped.exchange(true, ordering: .acquiringAndReleasing) else { return }
        unlink(socketPath)
        shutdown(listener, Int32(SHUT_RDWR))
    }

    deinit { stop(); close(listener) }

    private func acceptLoop() {
        UnixSocket.acceptLoop(listener, until: { stopped.load(ordering: .acquiring) }) { client in
            let worker = Thread { [self] in
                self.serve(client)
                close(client)
            }
            worker.name = "dbxfs-control-client"
            worker.start()
        }
    }

    private func serve(_ client: Int32) {
        let me = geteuid()
        if let peer = UnixSocket.peer(client)?.uid, peer != me, peer != 0 {
            logger.warning("control socket: refused a connection from uid \(peer)")
            return
        }
        UnixSocket.setTimeout(client, 10)
        let request: ControlRequest
        do {
            let line = try UnixSocket.readLine(client, limit: 64 << 10)
            request = try ReportCoding.decoder().decode(ControlRequest.self, from: line)
        } catch {
            reply(client, ControlErrorReply(error: "bad request"))
            return
        }
        switch request.command {
        case "status":
            reply(client, source.status(mountpoint: mountpoint))
        case "metrics":
            guard let metrics else {
                reply(client, ControlErrorReply(error: "the mount at \(mountpoint) keeps no metrics (it was started with --no-metrics)"))
                return
            }
            reply(client, MetricsReply(mountpoint: mountpoint, pid: getpid(), families: metrics.registry.collect()))
        case "sync":
            let timeout = request.timeoutSeconds ?? 3600
            // No send timeout while the (possibly long) wait runs; the client sets its own.
            UnixSocket.setTimeout(client, 0)
            logger.info("sync requested (timeout \(Int(timeout)) s)")
            let report = source.sync(mountpoint: mountpoint, deadline: Date().addingTimeInterval(timeout))
            logger.info(report.ok ? "sync: everything is committed" : "sync: \(counted(report.left.count, "file", "files")) not committed")
            reply(client, report)
        case let command where FileCommandService.commands.contains(command):
            // Remote calls and a revision's bytes may take longer than the 10 s above.
            UnixSocket.setTimeout(client, 0)
            guard let files else {
                reply(client, ControlErrorReply(error: "the mount at \(mountpoint) cannot run \(command): it serves no Dropbox files"))
                return
            }
            files.serve(request, mountpoint: mountpoint, client: client)
        default:
            reply(client, ControlErrorReply(error: "unknown command '\(request.command)'"))
        }
    }

    private func reply<T: Encodable>(_ client: Int32, _ value: T) {
        guard let data = try? ReportCoding.encoder().encode(value) else { return }
        try? UnixSocket.writeAll(client, data + Data("\n".utf8))
    }
}
