/// A path the user typed for a file command (`dbxfs history ~/Dropbox/notes.txt`), as the mount
/// sees it: the dbxfs mount it is on, that mount's control socket, and the path relative to the
/// mount root.
///
/// The path need not exist (`undelete` and `history` take deleted files): its deepest existing
/// ancestor is resolved (symlinks, `..`) and the missing components are appended as typed. The
/// mount is found from that ancestor as `dbxfs status PATH` finds it (ControlClient.socket).
import Foundation

struct MountPath {
    /// The mountpoint, absolute and symlink-free.
    let mountpoint: String
    let socket: String
    /// Relative to the mount root: "" for the mountpoint itself, else "/a/b".
    let relative: String
    /// Whether it is a folder on the mount, nil when it does not exist there.
    let isDirectory: Bool?

    /// The absolute path on the mount, as messages show it.
    var shown: String { FileCommandService.onMount(relative, mountpoint: mountpoint) }

    static func resolve(_ typed: String) throws(ControlClient.Failure) -> MountPath {
        var missing: [String] = []
        var existing = typed.isEmpty ? "." : typed
        var resolved: String?
        while true {
            if let real = ControlPaths.resolve(existing) { resolved = real; break }
            let code = errno
            if code == ENOTCONN {
                throw ControlClient.Failure(description: "\(existing) is on a dbxfs mount whose daemon died (run: fusermount3 -u on its mountpoint, then mount again)",
                                            notMounted: true)
            }
            let name = (existing as NSString).lastPathComponent
            let parent = (existing as NSString).deletingLastPathComponent
            guard code == ENOENT, !name.isEmpty, name != ".", name != ".." else { break }
            missing.insert(name, at: 0)
            existing = parent.isEmpty ? "." : parent
        }
        guard let resolved else {
            throw ControlClient.Failure(description: "\(typed) is not on a dbxfs mount (\(String(cString: strerror(errno))))", notMounted: true)
        }
        let target: (mountpoint: String, socket: String)
        do { target = try ControlClient.socket(forPath: resolved) } catch where error.notMounted {
            throw ControlClient.Failure(description: "\(typed) is not on a dbxfs mount", notMounted: true)
        }
        let full = missing.reduce(resolved == "/" ? "" : resolved) { $0 + "/" + $1 }
        let prefix = target.mountpoint == "/" ? "" : target.mountpoint
        guard full == target.mountpoint || full.hasPrefix(prefix + "/") else {
            throw ControlClient.Failure(description: "\(typed) is not on a dbxfs mount", notMounted: true)
        }
        let relative = full == target.mountpoint ? "" : String(full.dropFirst(prefix.count))
        var isDirectory: Bool?
        if missing.isEmpty {
            var st = stat()
            if stat(resolved, &st) == 0 { isDirectory = (st.st_mode & S_IFMT) == S_IFDIR }
        }
        return MountPath(mountpoint: target.mountpoint, socket: target.socket, relative: relative, isDirectory: isDirectory)
    }
}
