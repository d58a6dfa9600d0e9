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
///   never pay for hashing).
/// - By hashing the returned bytes here (any other block size). The bytes must then arrive in
///   order (overlaps are fine); any read that skips ahead abandons the check.
import ContentHash

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

    /// Feeds the bytes a read returned for `offset`; `pieceDigest(i)` gives the SHA-256 of 4 MiB
    /// piece i for the pieces this read's blocks hold. Returns the outcome so far.
    mutating func feed(offset: UInt64, _ bytes: UnsafeRawBufferPointer, pieceDigest: (UInt64) -> [UInt8]?) -> Outcome {
        guard outcome == .pending, !bytes.isEmpty else { return outcome }
        let end = offset + UInt64(bytes.count)
        if usesPieceDigests {
            let piece = UInt64(DropboxContentHasher.blockSize)
            let started = coveredUpTo > 0 || !ahead.isEmpty
            guard offset <= coveredUpTo + (started ? Self.reorderWindow : piece - 1) else {
                outcome = .abandoned
                return outcome
            }
            for index in (offset / piece)...((end - 1) / piece) where digests[index] == nil {
                guard let digest = pieceDigest(index) else { outcome = .abandoned; return outcome }
                digests[index] = digest
            }
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
