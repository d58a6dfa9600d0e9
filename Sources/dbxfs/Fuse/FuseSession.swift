/// One FUSE session in libfuse's own order: create → mount → loop → unmount → destroy.
/// Owns the `FuseFilesystem` (libfuse only holds an unretained pointer to it) and the signal
/// handlers that turn SIGINT/SIGTERM/SIGHUP into a clean loop exit.
///
/// `notifier` is how the rest of the daemon (the change watcher) drops the kernel's caches.
///
/// Unmounting only our own mount: libfuse's `fuse_session_unmount` unmounts by path (umount2 as
/// root, else `fusermount3 -u -z PATH`), and skips that only when the connection is already gone
/// (POLLERR on the /dev/fuse fd). After `fusermount3 -uz` on a busy mount, though, our connection
/// lives on, detached, while a successor may be mounted at the same path, and unmounting by path
/// would take the successor's mount. So `mount` records which mount it made (its mountinfo
/// entry: mount id and device number), and `unmount` unmounts by path only while that entry is
/// still the one on top at the path; otherwise it just closes the session, which ends the
/// detached connection. The device number cannot belong to another mount while our connection
/// lives (see MountTable); the one window left is between that check and the unmount.
import CFuse
import CFusePassthrough
import Foundation
import VFSCache

final class FuseSession {
    struct Failure: Error, CustomStringConvertible { var description: String }

    let filesystem: FuseFilesystem
    /// Pushes invalidations into the kernel's caches; Sendable, usable from any thread.
    let notifier = KernelCacheNotifier()
    private var session: OpaquePointer?
    private var mounted = false
    private var mountpoint = ""
    /// The mount `mount(at:)` made, from the mount table right after it (nil until then).
    private(set) var ownMount: MountTable.Entry?
    private var signalsInstalled = false

    /// Creates the session; `mountOptions` are libfuse `-o` options (ro, allow_other, ...).
    init(filesystem: FuseFilesystem, mountOptions: [String], debug: Bool) throws(Failure) {
        self.filesystem = filesystem
        var cArguments = Self.arguments(mountOptions: mountOptions, debug: debug).map { strdup($0) }
        defer { cArguments.forEach { free($0) } }
        var ops = makeOperationTable()
        let userdata = Unmanaged.passUnretained(filesystem).toOpaque()
        // libfuse parses the arguments (and rejects unknown -o options with a message of its own
        // on stderr) and copies what it keeps, so the strings may be freed after this call.
        let created: OpaquePointer? = cArguments.withUnsafeMutableBufferPointer { argv in
            var args = dbxfs_args_init(Int32(argv.count), argv.baseAddress)
            defer { fuse_opt_free_args(&args) }
            return fuse_session_new(&args, &ops, MemoryLayout<fuse_lowlevel_ops>.size, userdata)
        }
        guard let created else {
            throw Failure(description: "could not create the FUSE session (bad -o option?)")
        }
        session = created
        notifier.attach(created)
    }

    /// The argument vector libfuse parses: `-d` for debug, and the `-o` list.
    static func arguments(mountOptions: [String], debug: Bool) -> [String] {
        var arguments = ["dbxfs"]
        if debug { arguments.append("-d") }
        if !mountOptions.isEmpty { arguments += ["-o", mountOptions.joined(separator: ",")] }
        return arguments
    }

    /// Mounts; with `passthrough`, also installs the hooks that let the kernel serve opens from
    /// backing files (fully cached copies, writers' staging files; CFusePassthrough; needs root).
    func mount(at mountpoint: String, passthrough: Bool = false) throws(Failure) {
        guard let session else { return }
        if fuse_set_signal_handlers(session) != 0 {
            throw Failure(description: "could not install signal handlers")
        }
        signalsInstalled = true
        if fuse_session_mount(session, mountpoint) != 0 {
            throw Failure(description: "could not mount on \(mountpoint) (see the message above; is /dev/fuse usable?)")
        }
        mounted = true
        self.mountpoint = mountpoint
        // Nothing else can have mounted on top in the microseconds since: the last entry at the
        // path is ours.
        ownMount = MountTable.topmost(at: mountpoint)
        if passthrough {
            if dbxfs_passthrough_install(UnsafeMutableRawPointer(session)) == 0 {
                filesystem.passthrough.attach(session)
            } else {
                filesystem.log.info("passthrough unavailable (libfuse refused the I/O hooks); reads and writes go through dbxfs")
            }
        }
    }

    /// Serves requests until unmounted or signalled. `maxThreads` bounds the worker pool: every
    /// worker may sit on a network wait, so the pool must be larger than the number of requests
    /// the kernel keeps in flight (max_background read-ahead plus foreground callers).
    func loop(maxThreads: UInt32, maxIdleThreads: UInt32) -> Int32 {
        guard let session else { return -1 }
        let config = fuse_loop_cfg_create()
        defer { fuse_loop_cfg_destroy(config) }
        fuse_loop_cfg_set_max_threads(config, maxThreads)
        fuse_loop_cfg_set_idle_threads(config, maxIdleThreads)
        fuse_loop_cfg_set_clone_fd(config, 0)
        return dbxfs_session_loop_mt(session, config)
    }

    /// Whether the loop was asked to stop (a signal, `exit()`, the kernel ending the session), for
    /// a thread that watches while `loop` runs. Valid until the session is destroyed (after `unmount`).
    var exitedCheck: @Sendable () -> Bool {
        nonisolated(unsafe) let raw = session
        return { raw.map { fuse_session_exited($0) != 0 } ?? true }
    }

    /// Asks the loop to stop (as a signal would).
    func exit() { if let session { fuse_session_exit(session) } }

    /// Unmounts the mount this session made, and nothing else (see the top of the file).
    func unmount() {
        guard let session else { return }
        if signalsInstalled { fuse_remove_signal_handlers(session); signalsInstalled = false }
        guard mounted else { return }
        mounted = false
        var device = pollfd(fd: fuse_session_fd(session), events: 0, revents: 0)
        let connectionGone = poll(&device, 1, 0) == 1 && device.revents & Int16(POLLERR) != 0
        if connectionGone || ownMount == nil || MountTable.topmost(at: mountpoint) == ownMount {
            fuse_session_unmount(session)
        } else {
            filesystem.log.info("not unmounting \(mountpoint): it is no longer this daemon's mount (it was lazily unmounted"
                                + "\(MountTable.mountPoints().contains(mountpoint) ? ", and something else is mounted there now" : "")); "
                                + "closing the detached mount's connection instead")
            destroy()
        }
    }

    /// Whether the mount this session made is still in the mount table (false once it was
    /// unmounted, lazily or not). A closure over the entry, so other threads can ask.
    var attachedCheck: @Sendable () -> Bool {
        let own = ownMount
        return { own.map(MountTable.contains) ?? false }
    }

    /// Closes the session: the /dev/fuse fd goes, and with it the kernel's connection.
    private func destroy() {
        notifier.detach()
        filesystem.passthrough.detach()
        if let session { fuse_session_destroy(session) }
        session = nil
    }

    deinit {
        notifier.detach()
        filesystem.passthrough.detach()
        unmount()
        destroy()
    }
}
