/// `BlockKey` and `BlockRequest`: how cached file data is named. A block is `blockSize` bytes of
/// one revision of one file, so a new rev can never be served bytes of an old one: its blocks
/// simply have other keys, and the old ones age out of the LRU.
struct BlockKey: Hashable, Sendable, CustomStringConvertible {
    /// Dropbox file id ("id:..."), stable across renames, so a renamed file stays cached.
    var fileID: String
    var rev: String
    var index: UInt64

    var description: String { "\(fileID)@\(rev)#\(index)" }
}

/// A block to fetch: its key plus where to download it from.
struct BlockRequest: Sendable {
    var key: BlockKey
    /// Display path at open time, for the download and for log lines.
    var path: String
    /// Byte range of the block in the file (the last block is short).
    var range: Range<UInt64>

    var length: Int { Int(range.upperBound - range.lowerBound) }
}
