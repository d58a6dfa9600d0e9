/// `CachedBlock`: one block's bytes as the caches hold them, in memory the block owns (so their
/// address is stable for as long as anyone holds the block, and a read can hand the bytes to the
/// kernel without copying them first), plus the SHA-256 of each 4 MiB content-hash piece in it.
///
/// The digests are computed once, by the thread that downloaded or loaded the block (read-ahead
/// threads, in parallel), so checking a whole-file read against Dropbox's content_hash costs the
/// reader almost nothing, even on warm re-reads. They are only computed when the block size is a
/// multiple of 4 MiB (pieces then never straddle blocks); otherwise the handle hashes the bytes.
import CCrypto
import ContentHash

final class CachedBlock: @unchecked Sendable {
    // @unchecked: `storage` is filled before `init` and never written afterwards; freed in deinit.
    private let storage: UnsafeMutableRawBufferPointer
    /// SHA-256 of each 4 MiB piece of the block (the last may be short); empty when not computed.
    let pieceDigests: [[UInt8]]

    /// Takes ownership of `storage` (allocated with `allocate(byteCount:)`, fully initialized).
    init(adopting storage: UnsafeMutableRawBufferPointer, computeDigests: Bool) {
        self.storage = storage
        guard computeDigests else { pieceDigests = []; return }
        let piece = DropboxContentHasher.blockSize
        pieceDigests = stride(from: 0, to: storage.count, by: piece).map { start in
            var digest = [UInt8](repeating: 0, count: Int(SHA256_DIGEST_LENGTH))
            _ = SHA256(storage.baseAddress!.assumingMemoryBound(to: UInt8.self) + start, min(piece, storage.count - start), &digest)
            return digest
        }
    }

    /// A block holding a copy of `bytes` (tests, small helpers).
    convenience init(copying bytes: [UInt8], computeDigests: Bool) {
        let storage = UnsafeMutableRawBufferPointer.allocate(byteCount: bytes.count, alignment: 16)
        bytes.withUnsafeBytes { storage.copyMemory(from: $0) }
        self.init(adopting: storage, computeDigests: computeDigests)
    }

    deinit { storage.deallocate() }

    var count: Int { storage.count }

    /// The bytes; valid while this block is alive (keep a reference across any use).
    var buffer: UnsafeRawBufferPointer { UnsafeRawBufferPointer(storage) }

    /// A copy of the bytes as an array (tests).
    var bytes: [UInt8] { Array(buffer) }
}
