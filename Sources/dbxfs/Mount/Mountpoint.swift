/// Checks a mountpoint before anything else is started, so every refusal is one clear line:
/// missing, not a directory, not accessible, a stale FUSE mount, or already a mount point.
/// (Linux would happily stack a second FUSE mount on the first; we refuse instead.)
import Foundation

enum Mountpoint {
    struct Refused: Error, CustomStringConvertible { var description: String }

    /// Returns the absolute, symlink-free path to mount on.
    static func check(_ path: String) throws(Refused) -> String {
        var st = stat()
        if stat(path, &st) != 0 {
            let code = errno
            switch code {
            case ENOENT: throw Refused(description: "mountpoint \(path) does not exist")
            case ENOTCONN:
                throw Refused(description: "mountpoint \(path) is a stale FUSE mount (run: fusermount3 -u \(path))")
            default: throw Refused(description: "mountpoint \(path): \(String(cString: strerror(code)))")
            }
        }
        guard st.st_mode & S_IFMT == S_IFDIR else {
            throw Refused(description: "mountpoint \(path) is not a directory")
        }
        guard access(path, R_OK | W_OK | X_OK) == 0 else {
            throw Refused(description: "mountpoint \(path): permission denied")
        }
        guard let resolved = realpath(path, nil) else {
            throw Refused(description: "mountpoint \(path): \(String(cString: strerror(errno)))")
        }
        let absolute = String(cString: resolved)
        free(resolved)
        if MountTable.mountPoints().contains(absolute) {
            throw Refused(description: "mountpoint \(absolute) is already mounted (unmount it first: fusermount3 -u \(absolute))")
        }
        return absolute
    }
}
