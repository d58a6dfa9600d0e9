/// One FUSE session in libfuse's own order: create → mount → loop → unmount → destroy.
/// Owns the `FuseFilesystem` (libfuse only holds an unretained pointer to it) and the signal
/// handlers that turn SIGINT/SIGTERM/SIGHUP into a clean loop exit.
///
/// `notifier` is how the rest of the daemon (the change watcher) drops the kernel's caches.
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
    private var signalsInstalled = false

    /// Creates the session; `mountOptions` are libfuse `-o` options (ro, allow_other, ...).
    init(filesystem: FuseFilesystem, mountOptions: [String], debug: Bool) throws(Failure) {
        self.filesystem = filesystem
        var arguments = ["dbxfs"]
        if debug { arguments.append("-d") }
        if !mountOptions.isEmpty { arguments += ["-o", mountOptions.joined(separator: ",")] }
        var cArguments = arguments.map { strdup($0) }
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

    /// Mounts; with `passthrough`, also installs the hooks that let the kernel serve opens of
    /// fully cached files from their backing files (CFusePassthrough; needs root).
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
        if passthrough {
            if dbxfs_passthrough_install(UnsafeMutableRawPointer(session)) == 0 {
                filesystem.passthrough.attach(session)
            } else {
                filesystem.log.info("passthrough reads unavailable (libfuse refused the I/O hooks)")
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

    /// Asks the loop to stop (as a signal would).
    func exit() { if let session { fuse_session_exit(session) } }

    func unmount() {
        guard let session else { return }
        if signalsInstalled { fuse_remove_signal_handlers(session); signalsInstalled = false }
        if mounted { fuse_session_unmount(session); mounted = false }
    }

    deinit {
        notifier.detach()
        filesystem.passthrough.detach()
        unmount()
        if let session { fuse_session_destroy(session) }
    }
}
