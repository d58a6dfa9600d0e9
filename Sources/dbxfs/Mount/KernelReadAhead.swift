/// Raises the kernel's read-ahead window for the new mount (`/sys/class/bdi/<dev>/read_ahead_kb`).
///
/// FUSE can only lower the read-ahead the kernel offers in INIT (128 KiB by default), so with the
/// default, an application reading in 128 KiB pieces (cat, cp) sends 128 KiB requests even though
/// the mount accepts 1 MiB ones. Measured on the memfs ceiling (scripts/bench/memfs.c, `dd bs=128k`):
/// 2.4–2.7 GB/s at 128 KiB, 3.2–3.5 GB/s at 1 MiB. Only root may write the sysfs file; for other
/// users this is a logged no-op (gcsfuse documents the same knob for its users).
///
/// Order matters: the kernel sets the window again when it gets our INIT reply, to the smaller of
/// the current window and INIT's `max_readahead`. So this runs after `fuse_session_mount` but
/// before the loop answers INIT, and init answers the same size (SessionOperations).
///
/// The device number comes from /proc/self/mountinfo (MountTable), not from stat(2) on the mountpoint: the
/// FUSE loop is not running yet, and a stat would wait for our own GETATTR forever.
import Foundation
import VFSCache

enum KernelReadAhead {
    /// `device` is the mount's "major:minor" (MountTable), which names its backing device info.
    static func set(kib: Int, device: String, logger: Logger) {
        guard kib > 0 else { return }
        let path = "/sys/class/bdi/\(device)/read_ahead_kb"
        do {
            try "\(kib)\n".write(toFile: path, atomically: false, encoding: .utf8)
            logger.debug("read-ahead: \(path) = \(kib)")
        } catch {
            logger.info("kernel read-ahead left at its default (cannot write \(path); needs root)")
        }
    }
}
