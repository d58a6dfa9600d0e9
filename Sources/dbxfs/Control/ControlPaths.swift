/// Where a mount's control socket lives: `<runtime dir>/dbxfs/<16 hex digits of
/// sha256(absolute mountpoint, newline, the mount's device number)>.sock`. The name is derived
/// from the mount so that `dbxfs status MOUNTPOINT` finds its daemon without any registry, and
/// fixed-length so the path stays within a Unix socket's 108-byte limit however long the
/// mountpoint is.
///
/// The device number ("major:minor" in the mount table) is in the name because one path can
/// have two daemons: one whose mount was lazily unmounted (`fusermount3 -uz`) but still serves
/// open files, or is finishing its uploads after unmount, and the successor mounted there since.
/// Each keeps its own socket, and the path's current mount names the one that serves it.
import ContentHash
import Foundation

enum ControlPaths {
    static func directory(paths: XDGPaths = XDGPaths()) -> String { paths.runtimeDirectory }

    static func socketPath(forMountpoint absolute: String, device: String, paths: XDGPaths = XDGPaths()) -> String {
        directory(paths: paths) + "/" + String(hex(sha256(Array("\(absolute)\n\(device)".utf8))).prefix(16)) + ".sock"
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
