/// `ContentVerifier`: checks a whole-file read through one handle against Dropbox's
/// `content_hash` (SHA-256 over the SHA-256 digests of each 4 MiB piece). Once every byte of the
/// file has been returned, the hash must match.
///
/// Two ways to get the piece digests:
/// - From the cached blocks, which compute them when fetched (`usesPieceDigests`: block sizes
///   that are multiples of 4 MiB, the default). Reads may then arrive in any order within a
///   window, as they do through FUSE, where the kernel keeps several read-ahead requests in
///   flight. The check starts only with a first read in the first 4 MiB piece; a first read
///   elsewhere, a read more than `reorderWindow` past the covered prefix, or too many scattered
///   pieces mean random access, and the check is abandoned for that handle (so random readers
///   never pay for hashing). A read may be served from a block still arriving: its digest is
///   taken once the block is whole (the check holds the block until then); a block whose
///   download broke off abandons the check, since the bytes already returned were never hashed.
/// - By hashing the returned bytes here (any other block size). The bytes must then arrive in
///   order (overlaps are fine); any read that skips ahead abandons the check.
import ContentHash

/// Where the digest of a 4 MiB piece comes from: a whole block that holds the piece (perhaps
/// still arriving), and the piece's number within it.
struct PieceSource {
    let block: CachedBlock
    let slot: Int
}

struct ContentVerifier: ~Copyable {
    enum Outcome: Equatable { case pending, matched, mismatched(actual: String), abandoned }

    /// How far ahead of the covered prefix an out-of-order read may land.
    static let reorderWindow: UInt64 = 256 << 20
    /// How many separate ranges may wait ahead of the prefix.
    static let maxPendingRanges = 1024

    let expected: String
    let size: UInt64
    let usesPieceDigests: Bool
    /// Streaming mode: the running content hash of the covered prefix.
    private var hasher = DropboxContentHasher()
    /// Piece-digest mode: the digest of each piece a read has touched.
    private var digests: [UInt64: [UInt8]] = [:]
    /// Piece-digest mode: pieces whose block was still arriving when a read touched them.
    private var waiting: [UInt64: PieceSource] = [:]
    /// Bytes [0, coveredUpTo) have all been returned.
    private(set) var coveredUpTo: UInt64 = 0
    /// Piece-digest mode: ranges returned beyond the prefix, sorted and disjoint.
    private var ahead: [Range<UInt64>] = []
    private(set) var outcome: Outcome = .pending

    init(expected: String, size: UInt64, usesPieceDigests: Bool) {
        self.expected = expected
        self.size = size
        self.usesPieceDigests = usesPieceDigests
    }

    /// Whether a read at `offset` would keep the check going (it ends with a read that would not).
    func accepts(offset: UInt64) -> Bool {
        guard outcome == .pending else { return false }
        guard usesPieceDigests else { return offset <= coveredUpTo }
        let started = coveredUpTo > 0 || !ahead.isEmpty
        return offset <= coveredUpTo + (started ? Self.reorderWindow : UInt64(DropboxContentHasher.blockSize) - 1)
    }

    /// Feeds the bytes a read returned for `offset`; `pieceSource(i)` tells where the SHA-256 of
    /// 4 MiB piece i is for the pieces this read's blocks hold (nil: nowhere, the bytes came from
    /// fragments). Returns the outcome so far.
    mutating func feed(offset: UInt64, _ bytes: UnsafeRawBufferPointer, pieceSource: (UInt64) -> PieceSource?) -> Outcome {
        guard outcome == .pending, !bytes.isEmpty else { return outcome }
        let end = offset + UInt64(bytes.count)
        if usesPieceDigests {
            let piece = UInt64(DropboxContentHasher.blockSize)
            guard accepts(offset: offset) else {
                outcome = .abandoned
                return outcome
            }
            for index in (offset / piece)...((end - 1) / piece) where digests[index] == nil && waiting[index] == nil {
                guard let source = pieceSource(index) else { outcome = .abandoned; return outcome }
                waiting[index] = source
            }
            guard takeArrivedDigests() else { outcome = .abandoned; return outcome }
            cover(offset..<end)
            guard ahead.count <= Self.maxPendingRanges else { outcome = .abandoned; return outcome }
        } else {
            guard offset <= coveredUpTo else { outcome = .abandoned; return outcome }
            if end > coveredUpTo {
                hasher.update(UnsafeRawBufferPointer(rebasing: bytes[Int(coveredUpTo - offset)...]))
                coveredUpTo = end
            }
        }
        if coveredUpTo >= size { outcome = finish() }
        return outcome
    }

    /// Moves the digests of pieces whose blocks are now whole out of `waiting` (and lets go of
    /// those blocks); false if a block's download broke off.
    private mutating func takeArrivedDigests() -> Bool {
        for (index, source) in waiting {
            if let digest = source.block.pieceDigest(source.slot) {
                digests[index] = digest
                waiting[index] = nil
            } else if source.block.isBroken {
                return false
            }
        }
        return true
    }

    /// Adds a returned range, then extends the prefix over whatever now joins it.
    private mutating func cover(_ range: Range<UInt64>) {
        if range.lowerBound <= coveredUpTo {
            coveredUpTo = max(coveredUpTo, range.upperBound)
        } else {
            let position = ahead.firstIndex { $0.lowerBound > range.lowerBound } ?? ahead.endIndex
            ahead.insert(range, at: position)
        }
        while let first = ahead.first, first.lowerBound <= coveredUpTo {
            coveredUpTo = max(coveredUpTo, first.upperBound)
            ahead.removeFirst()
        }
    }

    private mutating func finish() -> Outcome {
        let actual: String
        if usesPieceDigests {
            // Every byte has been returned, so every block read from is whole by now, unless the
            // piece's bytes came partly from another download of its block (this one broke off, or
            // a purge made a new one): then those bytes were never hashed, and nothing is checked.
            guard takeArrivedDigests(), waiting.isEmpty else { return .abandoned }
            let pieces = (size + UInt64(DropboxContentHasher.blockSize) - 1) / UInt64(DropboxContentHasher.blockSize)
            var all: [UInt8] = []
            all.reserveCapacity(Int(pieces) * 32)
            for index in 0..<pieces {
                guard let digest = digests[index] else { return .abandoned }
                all += digest
            }
            actual = hex(sha256(all))
        } else {
            actual = hasher.finalize()
        }
        return actual == expected ? .matched : .mismatched(actual: actual)
    }
}
