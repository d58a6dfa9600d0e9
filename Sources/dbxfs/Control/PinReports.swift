/// The wire format of `dbxfs pin`, `dbxfs unpin` and `dbxfs pin --list` on the control socket,
/// which is also what their `--json` prints, and the `pins` section of `dbxfs status`
/// (docs/STATUS.md, "Pins"). Same rules as the other reports: snake_case keys, bytes, optional
/// fields omitted, fields only ever added.
import Foundation
import VFSCache

/// `dbxfs pin PATH` and `dbxfs unpin PATH`, one path.
struct PinReport: FileCommandAnswer, Sendable {
    /// The absolute path on the mount.
    var path: String
    /// Files under it (pin: to keep offline; unpin: no longer kept).
    var files: Int
    var bytes: UInt64
    /// Pin: the path was pinned already (nothing new). Unpin: false.
    var alreadyPinned: Bool
    var pid: Int32?
}

/// What `dbxfs pin --json` and `dbxfs unpin --json` print: one report per path that worked.
struct PinResults: Codable, Sendable {
    var pinned: [PinReport]?
    var unpinned: [PinReport]?
}

/// Where the files of one pin (or of all pins) stand.
struct PinCountsReport: Codable, Sendable {
    var files: Int
    var bytes: UInt64
    /// On disk, checked against the content hash, at their latest known revision.
    var current: Int
    /// Waiting to be downloaded or being downloaded.
    var fetching: Int
    /// The last attempt failed; tried again every few seconds.
    var failed: Int
    /// Bytes of the current files plus what the downloads under way have.
    var bytesFetched: UInt64

    init(_ counts: PinCounts) {
        files = counts.files; bytes = counts.bytes; current = counts.current; fetching = counts.fetching
        failed = counts.failed; bytesFetched = counts.bytesFetched
    }
}

struct PinFailureReport: Codable, Sendable {
    var path: String
    var message: String
}

/// One pin in `dbxfs pin --list`.
struct PinnedPathReport: Codable, Sendable {
    var path: String
    /// False while nothing is at the path on Dropbox (it is pinned again if something comes back).
    var exists: Bool
    var counts: PinCountsReport
    /// The files whose last download failed, with why (at most 20).
    var failures: [PinFailureReport]
}

/// `dbxfs pin --list`: the pins of one mount.
struct PinListReport: FileCommandAnswer, Sendable {
    var mountpoint: String
    var pins: [PinnedPathReport]
    /// Bytes the pinned files take in the disk cache, and its budget (`--cache-size`).
    var diskBytes: Int64
    var diskBudget: Int64
    var pid: Int32?
}

/// The `pins` section of `dbxfs status` (omitted when nothing is pinned).
struct PinsStatusReport: Codable, Sendable {
    /// How many paths are pinned.
    var paths: Int
    /// Every pinned file once, whichever pins hold it.
    var counts: PinCountsReport
    /// Bytes the pinned files take in the disk cache.
    var diskBytes: Int64
}
