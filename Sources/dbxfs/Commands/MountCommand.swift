/// `dbxfs [options] MOUNTPOINT`: checks everything that can be checked cheaply (options,
/// mountpoint, credentials, the server), then create → mount → loop → unmount, libfuse-example
/// style. Without -f it detaches first (before any thread exists) and the parent exits 0 only
/// once the child reports the mount live.
import CFuse
import Foundation
import Synchronization
import VFSCache

enum MountCommand {
    static func run(_ arguments: [String]) -> Int32 {
        // Everything the mount creates (cache files, staging copies of file contents, the log, the
        // index beside the cache directories) is its user's alone, whatever umask it was started
        // with (docs/SEMANTICS.md, "Who can read what"). Modes shown on the mount do not depend on it.
        umask(0o077)
        // The config file's defaults go first, so the command line overrides them.
        let config: ConfigFile
        do { config = try ConfigFile.load() } catch {
            printError(error.description)
            return 2
        }
        var options: MountOptions
        do {
            options = try MountOptions.parse(config.mountArguments + arguments, environment: ProcessInfo.processInfo.environment)
        } catch {
            printError(error.description)
            return 2
        }
        if options.showHelp {
            print(Subcommand.overview)
            return 0
        }
        // Before anything is created or forked: an option libfuse refuses is bad usage.
        if let problem = FuseOptionCheck.problem(mountOptions: fuseOptions(options), debug: options.debug) {
            printError(problem)
            return 2
        }
        let mountpoint: String
        do {
            mountpoint = try Mountpoint.check(options.mountpoint)
        } catch {
            printError(error.description)
            return 1
        }
        options.mountpoint = mountpoint

        let reporter: Daemon.Reporter? = options.foreground ? nil : Daemon.detach()
        // From here on, failures go through `fail`, which tells a waiting parent too.
        func fail(_ message: String) -> Int32 {
            if let reporter { reporter.failed(message) } else { printError(message) }
            return 1
        }

        // Detached, the terminal gets the outcome only: lines logged until the mount is live wait
        // for the log file. In the foreground they go to stderr as they come.
        let startupLog = reporter.map { _ in StartupLog() }
        let logger = Logger(level: LogLevel(name: options.logLevel) ?? .info, sink: startupLog?.sink ?? timestampedStandardErrorSink)
        // Kept unless --no-metrics (for `dbxfs status --prometheus`); served over HTTP with --metrics,
        // bound before anything else starts, so a port in use refuses the mount.
        let metrics = options.keepMetrics ? MountMetrics() : nil
        var endpoint: MetricsEndpoint?
        if let address = options.metricsAddress, let metrics {
            do { endpoint = try MetricsEndpoint(address: address, render: { metrics.render() }) } catch {
                return fail(error.description)
            }
        }
        let backend: MountBackend
        do {
            backend = try MountBackend.open(options: options, logger: logger, metrics: metrics,
                                            stillWanted: { reporter?.parentWaits ?? true })
        } catch {
            endpoint?.stop()
            return fail(error.description)
        }

        let filesystem = FuseFilesystem(operations: backend.operations, readDirectoryPlus: options.readDirectoryPlus,
                                        maxReadAhead: UInt32(clamping: options.kernelReadAheadKiB * 1024), metrics: metrics,
                                        log: logger)
        let session: FuseSession
        do {
            session = try FuseSession(filesystem: filesystem, mountOptions: fuseOptions(options), debug: options.debug)
            try session.mount(at: mountpoint, passthrough: options.passthrough || options.passthroughWrites)
        } catch {
            endpoint?.stop()
            backend.shutdown()
            backend.discardNewCache()
            return fail(error.description)
        }
        backend.mounted()
        let attached = session.attachedCheck
        backend.statusSource.phase.withLock { $0 = .serving(attached: attached) }
        // The status/sync socket (Control/) is named after the mount's device number, so it comes
        // right after the mount; `dbxfs status` allows for that moment. Without it the mount
        // still works; only status and sync don't.
        var control: ControlServer?
        if let device = session.ownMount?.device {
            do {
                control = try ControlServer(mountpoint: mountpoint, device: device, source: backend.statusSource,
                                            files: backend.fileCommands, metrics: metrics, logger: logger)
            } catch {
                logger.warning("'dbxfs status' and 'dbxfs sync' will not see this mount: \(error.description)")
            }
        } else {
            logger.warning("'dbxfs status' and 'dbxfs sync' will not see this mount: it is not in /proc/self/mountinfo")
        }
        backend.cacheLock?.record(state: "mounted", socket: control?.socketPath)
        // Remote changes reach the kernel's caches through the session's notifier (issue 7).
        backend.startChangeWatcher(session.notifier)
        // Before the loop starts: the kernel applies INIT's answer on top of this window.
        if let device = session.ownMount?.device {
            KernelReadAhead.set(kib: options.kernelReadAheadKiB, device: device, logger: logger)
        }
        if let reporter {
            reporter.succeeded(note: backend.startupNote)
            Daemon.redirectOutput(logFile: backend.logFile)
            startupLog?.flush()
        }
        logger.info("mounted \(backend.description) on \(mountpoint)")
        if let endpoint {
            endpoint.start()
            logger.info("metrics: serving http://\(endpoint.address)/metrics")
        }

        // libfuse's loop ends only once every request in progress has returned; an fsync waiting
        // for an unreachable Dropbox would hold it (and the daemon) for its hour. So the stop is
        // noticed at once: waiting requests give up by the drain bound (StopDeadline).
        let loopDone = Atomic<Bool>(false)
        let exited = session.exitedCheck, beginStopping = backend.beginStopping
        let watcherDone = DispatchSemaphore(value: 0)
        let stopWatcher = Thread {
            defer { watcherDone.signal() }
            while !loopDone.load(ordering: .relaxed) {
                if exited() {
                    // Said at once: a request waiting for an unreachable Dropbox can hold the
                    // loop until the drain bound, and the log was silent meanwhile.
                    logger.info("stopping: the mount ends once the requests in progress return; any still waiting for an upload gets an error at the unmount's drain bound")
                    beginStopping()
                    return
                }
                usleep(100_000)
            }
        }
        stopWatcher.name = "dbxfs-stop-watch"
        stopWatcher.start()
        let status = session.loop(maxThreads: options.maxThreads, maxIdleThreads: 8)
        loopDone.store(true, ordering: .relaxed)
        watcherDone.wait()   // it reads the session, which goes away after unmount
        backend.beginStopping()
        session.unmount()
        logger.info("unmounted \(mountpoint)")
        // Until the process exits it still holds the cache directory and answers status: say
        // that it is finishing its uploads (a mount refused meanwhile names them).
        backend.statusSource.phase.withLock { $0 = .unmounted }
        backend.cacheLock?.record(state: "unmounted", socket: control?.socketPath)
        backend.shutdown()
        control?.stop()
        endpoint?.stop()
        // The loop returns the signal number when a signal ended it; that is a clean stop.
        return status == 0 || status == SIGINT || status == SIGTERM || status == SIGHUP ? 0 : 1
    }

    /// The -o list libfuse sees: the user's pass-through options plus our names in /proc/mounts.
    private static func fuseOptions(_ options: MountOptions) -> [String] {
        var list = ["fsname=dbxfs", "subtype=dbxfs"]
        list += options.fuseOptions
        return list
    }
}

/// "2026-11-29T21:04:05.123Z dbxfs: info: message": the daemon's log lines carry a timestamp.
let timestampedStandardErrorSink: Logger.Sink = { level, message in
    StandardError.write(timestamped(level, message))
}

/// The log lines of a detached mount until it is live: kept in memory, then written to stderr
/// once it points at the log file (`flush`), so a successful mount prints nothing on the terminal
/// and the log still has every line, in order. Lines after `flush` go straight to stderr.
final class StartupLog: Sendable {
    private let kept = Mutex<[String]?>([])

    var sink: Logger.Sink {
        { [self] level, message in
            let line = timestamped(level, message)
            let held = kept.withLock { lines -> Bool in
                guard lines != nil else { return false }
                lines!.append(line)
                return true
            }
            if !held { StandardError.write(line) }
        }
    }

    func flush() {
        let lines = kept.withLock { lines -> [String] in
            defer { lines = nil }
            return lines ?? []
        }
        if !lines.isEmpty { StandardError.write(lines.joined()) }
    }
}

private func timestamped(_ level: LogLevel, _ message: String) -> String {
    var now = timespec()
    clock_gettime(CLOCK_REALTIME, &now)
    var seconds = now.tv_sec
    var parts = tm()
    gmtime_r(&seconds, &parts)
    let stamp = String(format: "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", parts.tm_year + 1900, parts.tm_mon + 1,
                       parts.tm_mday, parts.tm_hour, parts.tm_min, parts.tm_sec, now.tv_nsec / 1_000_000)
    return "\(stamp) dbxfs: \(level.label): \(message)\n"
}
