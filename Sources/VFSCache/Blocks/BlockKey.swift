/// `BlockKey` and `BlockRequest`: how cached file data is named. A block is `blockSize` bytes of
/// one revision of one file, so a new rev can never be served bytes of an old one: its blocks
/// simply have other keys, and the old ones age out of the LRU. A fragment is one aligned
/// `fragmentBytes` part of a block, what random readers fetch (docs/VFSCACHE.md, "Fragments").
struct BlockKey: Hashable, Sendable, CustomStringConvertible {
    /// Dropbox file id ("id:..."), stable across renames, so a renamed file stays cached.
    var fileID: String
    var rev: String
    var index: UInt64
    /// Which fragment of block `index` this is; `BlockKey.whole` for the block itself.
    var part: UInt16 = BlockKey.whole

    static let whole = UInt16.max

    var isWholeBlock: Bool { part == Self.whole }

    /// The block this fragment is part of (itself for a block).
    var wholeBlock: BlockKey { BlockKey(fileID: fileID, rev: rev, index: index) }

    func fragment(_ part: Int) -> BlockKey { BlockKey(fileID: fileID, rev: rev, index: index, part: UInt16(part)) }

    var description: String { "\(fileID)@\(rev)#\(index)" + (isWholeBlock ? "" : ".\(part)") }
}

/// A block (or fragment) to fetch: its key plus where to download it from.
struct BlockRequest: Sendable {
    var key: BlockKey
    /// Display path at open time, for the download and for log lines.
    var path: String
    /// Byte range of the block in the file (the last block is short).
    var range: Range<UInt64>

    var length: Int { Int(range.upperBound - range.lowerBound) }

    /// Fragment `part` of this block, `fragmentBytes` long (the last one may be short).
    func fragment(_ part: Int, fragmentBytes: Int) -> BlockRequest {
        let start = range.lowerBound + UInt64(part * fragmentBytes)
        return BlockRequest(key: key.fragment(part), path: path, range: start..<min(start + UInt64(fragmentBytes), range.upperBound))
    }
}
