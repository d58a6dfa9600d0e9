/// `CachedBlock`: one block's bytes as the caches hold them, plus the SHA-256 of each 4 MiB
/// content-hash piece it contains. The digests are computed once, by the thread that downloaded
/// or loaded the block (read-ahead threads, in parallel), so checking a whole-file read against
/// Dropbox's content_hash costs the reader almost nothing, even on warm re-reads. They are only
/// computed when the block size is a multiple of 4 MiB (pieces then never straddle blocks);
/// otherwise the handle hashes the bytes it returns.
import ContentHash

final class CachedBlock: Sendable {
    let bytes: [UInt8]
    /// SHA-256 of each 4 MiB piece of `bytes` (the last may be short); empty when not computed.
    let pieceDigests: [[UInt8]]

    init(bytes: [UInt8], computeDigests: Bool) {
        self.bytes = bytes
        guard computeDigests else { pieceDigests = []; return }
        let piece = DropboxContentHasher.blockSize
        if bytes.count <= piece {
            pieceDigests = [sha256(bytes)]   // an Array argument is hashed in place, uncopied
        } else {
            pieceDigests = stride(from: 0, to: bytes.count, by: piece).map { sha256(bytes[$0..<min($0 + piece, bytes.count)]) }
        }
    }

    var count: Int { bytes.count }
}
