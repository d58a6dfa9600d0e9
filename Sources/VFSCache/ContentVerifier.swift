/// `ContentVerifier`: checks a whole-file sequential read against Dropbox's `content_hash`
/// (SHA-256 over the SHA-256 digests of each 4 MiB piece). It follows the bytes a handle returns
/// as long as reads continue where the covered prefix ends (overlaps are fine); a read that skips
/// ahead stops the check for that handle. When the prefix reaches the file size, the hash must match.
///
/// Two ways to get the piece digests: from the cached blocks, which computed them when they were
/// fetched (`usesPieceDigests`, block sizes that are multiples of 4 MiB), or by hashing the
/// returned bytes here (any other block size).
import ContentHash

struct ContentVerifier: ~Copyable {
    enum Outcome: Equatable { case pending, matched, mismatched(actual: String), abandoned }

    let expected: String
    let size: UInt64
    let usesPieceDigests: Bool
    /// Streaming mode: the running content hash of the covered prefix.
    private var hasher = DropboxContentHasher()
    /// Piece-digest mode: the digests of the pieces covered so far, concatenated.
    private var digests: [UInt8] = []
    private var nextPiece: UInt64 = 0
    private(set) var coveredUpTo: UInt64 = 0
    private(set) var outcome: Outcome = .pending

    init(expected: String, size: UInt64, usesPieceDigests: Bool) {
        self.expected = expected
        self.size = size
        self.usesPieceDigests = usesPieceDigests
    }

    /// Feeds the bytes a read returned for `offset`; `pieceDigest(i)` gives the SHA-256 of 4 MiB
    /// piece i when the read's blocks hold it. Returns the outcome so far.
    mutating func feed(offset: UInt64, _ bytes: UnsafeRawBufferPointer, pieceDigest: (UInt64) -> [UInt8]?) -> Outcome {
        guard outcome == .pending else { return outcome }
        let end = offset + UInt64(bytes.count)
        guard offset <= coveredUpTo else { outcome = .abandoned; return outcome }
        if end > coveredUpTo {
            if !usesPieceDigests {
                hasher.update(UnsafeRawBufferPointer(rebasing: bytes[Int(coveredUpTo - offset)...]))
            }
            coveredUpTo = end
        }
        if usesPieceDigests {
            let piece = UInt64(DropboxContentHasher.blockSize)
            while nextPiece * piece < size && min((nextPiece + 1) * piece, size) <= coveredUpTo {
                guard let digest = pieceDigest(nextPiece) else { outcome = .abandoned; return outcome }
                digests += digest
                nextPiece += 1
            }
        }
        if coveredUpTo >= size {
            let actual = usesPieceDigests ? hex(sha256(digests)) : hasher.finalize()
            outcome = actual == expected ? .matched : .mismatched(actual: actual)
        }
        return outcome
    }
}
