/// Where a mount's control socket lives: `<runtime dir>/dbxfs/<16 hex digits of
/// sha256(absolute mountpoint)>.sock`. The name is derived from the mountpoint so that
/// `dbxfs status MOUNTPOINT` finds its mount without any registry, and fixed-length so the path
/// stays within a Unix socket's 108-byte limit however long the mountpoint is.
import ContentHash
import Foundation

enum ControlPaths {
    static func directory(paths: XDGPaths = XDGPaths()) -> String { paths.runtimeDirectory }

    static func socketPath(forMountpoint absolute: String, paths: XDGPaths = XDGPaths()) -> String {
        directory(paths: paths) + "/" + String(hex(sha256(Array(absolute.utf8))).prefix(16)) + ".sock"
    }

    /// Every socket in the directory (live or stale).
    static func allSockets(paths: XDGPaths = XDGPaths()) -> [String] {
        let dir = directory(paths: paths)
        let names = (try? FileManager.default.contentsOfDirectory(atPath: dir)) ?? []
        return names.filter { $0.hasSuffix(".sock") }.sorted().map { dir + "/" + $0 }
    }

    /// The absolute, symlink-free form of a path the user typed, or nil when it does not exist.
    static func resolve(_ path: String) -> String? {
        guard let resolved = realpath(path, nil) else { return nil }
        defer { free(resolved) }
        return String(cString: resolved)
    }
}
