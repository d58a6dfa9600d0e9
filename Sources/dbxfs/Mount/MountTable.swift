/// The mount table of this mount namespace, read from /proc/self/mountinfo (proc(5)): which
/// paths are mount points, and which mount sits on top at a path.
///
/// A mount is named by its mount id and its device number ("major:minor", the st_dev its files
/// report). Reading the table never touches the mounts themselves, which matters for our own
/// FUSE mount: before the loop runs, a stat(2) of it would wait for our own GETATTR forever.
import Foundation

enum MountTable {
    struct Entry: Equatable, Sendable {
        /// Field 1. Unique among live mounts; the kernel may reuse it once a mount is gone.
        var mountID: Int
        /// Field 3, "major:minor". A FUSE mount's anonymous device number is held as long as its
        /// connection lives (even lazily unmounted), so no other mount can have it meanwhile.
        var device: String
        var mountPoint: String
        /// The filesystem type after the " - " separator ("fuse.dbxfs" for our mounts).
        var fsType: String
    }

    static func entries() -> [Entry] {
        guard let text = try? String(contentsOfFile: "/proc/self/mountinfo", encoding: .utf8) else { return [] }
        var result: [Entry] = []
        for line in text.split(separator: "\n") {
            let fields = line.split(separator: " ", omittingEmptySubsequences: false)
            guard fields.count > 4, let id = Int(fields[0]) else { continue }
            // Optional fields (shared:N, master:N, ...) come before the "-" separator.
            let separator = fields.firstIndex(of: "-") ?? fields.endIndex
            let fsType = separator + 1 < fields.endIndex ? String(fields[separator + 1]) : ""
            result.append(Entry(mountID: id, device: String(fields[2]), mountPoint: unescape(String(fields[4])), fsType: fsType))
        }
        return result
    }

    /// Mount points of this mount namespace.
    static func mountPoints() -> Set<String> { Set(entries().map(\.mountPoint)) }

    /// The mount on top at `path` (mounts stacked on one path are listed in the order they were
    /// made, so the last one is the visible one), or nil when `path` is not a mount point.
    static func topmost(at path: String) -> Entry? { entries().last { $0.mountPoint == path } }

    /// Whether `entry` is still in the table: false once it was unmounted, lazily or not.
    static func contains(_ entry: Entry) -> Bool { entries().contains(entry) }

    /// mountinfo writes space, tab, newline and backslash as \040, \011, \012, \134.
    static func unescape(_ field: String) -> String {
        var bytes: [UInt8] = []
        let raw = Array(field.utf8)
        var i = 0
        while i < raw.count {
            if raw[i] == UInt8(ascii: "\\"), i + 3 < raw.count,
               let code = UInt8(String(decoding: raw[(i + 1)...(i + 3)], as: UTF8.self), radix: 8) {
                bytes.append(code); i += 4
            } else {
                bytes.append(raw[i]); i += 1
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
