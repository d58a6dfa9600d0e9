/// `CachedBlock`: one block's bytes as the caches hold them, in memory the block owns (so their
/// address is stable for as long as anyone holds the block, and a read can hand the bytes to the
/// kernel without copying them first), plus the SHA-256 of each 4 MiB content-hash piece in it.
///
/// A block being downloaded exists before its bytes do (`init(filling:)`): the download writes
/// them in order and moves `filled` on, and readers may use any prefix already filled (time to
/// first byte: the first 128 KiB of a cold file do not wait for the other 3.9 MiB). Bytes below
/// `filled` are never written again. Only whole blocks (`isWhole`) enter the caches or have piece
/// digests.
///
/// The piece digests serve the whole-file content-hash check. Blocks fetched by read-ahead (which
/// only runs for sequential readers, the ones that get checked) compute them right away, on the
/// read-ahead thread, in parallel with the reader. Any other block computes them on first use, so
/// random-access readers never pay for hashing. Once computed they are kept, so a warm re-read
/// from memory is checked for free. Piece digests only exist when the block size is a multiple of
/// 4 MiB (pieces then never straddle blocks); otherwise the handle hashes the bytes itself.
import CCrypto
import ContentHash
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

final class CachedBlock: @unchecked Sendable {
    // @unchecked: `storage` is written only above `filled`, by the one download filling it
    // (or before `init`), and read only below `filled`; freed in deinit. `digests` is behind its
    // mutex.
    private let storage: UnsafeMutableRawBufferPointer
    private let digests: Mutex<[[UInt8]]?>
    /// Bytes [0, filled) are in place (a release store after they were written).
    private let filledBytes: Atomic<Int>
    /// The download filling this block stopped before its end.
    private let broken = Atomic<Bool>(false)

    /// Memory for a block's bytes, mapped straight from the kernel rather than taken from malloc:
    /// glibc serves freed multi-megabyte chunks again from its per-thread arenas and rarely gives
    /// them back, which made the daemon's RSS grow far past the cache budget. Freed buffers go to
    /// `BlockBufferPool.shared` (bounded) for the next block, and past its cap back to the system.
    /// The contents are unspecified: the caller fills every byte. Release it with `releaseStorage`
    /// unless a block adopts it.
    static func allocateStorage(byteCount: Int) -> UnsafeMutableRawBufferPointer {
        BlockBufferPool.shared.take(byteCount: byteCount)
    }

    static func releaseStorage(_ storage: UnsafeMutableRawBufferPointer) {
        BlockBufferPool.shared.give(storage)
    }

    /// Takes ownership of `storage` (from `allocateStorage`, fully initialized).
    init(adopting storage: UnsafeMutableRawBufferPointer, computeDigests: Bool) {
        self.storage = storage
        filledBytes = Atomic(storage.count)
        digests = Mutex(computeDigests ? Self.hashPieces(UnsafeRawBufferPointer(storage)) : nil)
    }

    /// Takes ownership of `storage` (from `allocateStorage`), empty: its one writer fills it in
    /// order with `append`.
    init(filling storage: UnsafeMutableRawBufferPointer) {
        self.storage = storage
        filledBytes = Atomic(0)
        digests = Mutex(nil)
    }

    /// A block holding a copy of `bytes` (tests, small helpers).
    convenience init(copying bytes: [UInt8], computeDigests: Bool = false) {
        let storage = Self.allocateStorage(byteCount: bytes.count)
        bytes.withUnsafeBytes { if !$0.isEmpty { storage.copyMemory(from: $0) } }
        self.init(adopting: storage, computeDigests: computeDigests)
    }

    deinit { Self.releaseStorage(storage) }

    var count: Int { storage.count }

    /// How many bytes, from the start, are in place.
    var filled: Int { filledBytes.load(ordering: .acquiring) }

    /// Whether every byte is in place.
    var isWhole: Bool { filled == storage.count }

    /// Whether the download filling it stopped short (it will never be whole).
    var isBroken: Bool { broken.load(ordering: .acquiring) }

    /// The filling download's write: copies as much of `bytes` as fits after the filled prefix
    /// and returns how many it took. One writer only.
    func append(_ bytes: UnsafeRawBufferPointer) -> Int {
        let at = filledBytes.load(ordering: .relaxed)
        let count = min(bytes.count, storage.count - at)
        guard count > 0 else { return 0 }
        UnsafeMutableRawBufferPointer(rebasing: storage[at..<(at + count)])
            .copyMemory(from: UnsafeRawBufferPointer(rebasing: bytes[..<count]))
        filledBytes.store(at + count, ordering: .releasing)
        return count
    }

    /// The filling download stopped short.
    func markBroken() { broken.store(true, ordering: .releasing) }

    /// Computes the piece digests now (the read-ahead thread that finished the block), if whole.
    func computeDigests() {
        guard isWhole else { return }
        digests.withLock { digests in
            if digests == nil { digests = Self.hashPieces(UnsafeRawBufferPointer(storage)) }
        }
    }

    /// The bytes; valid while this block is alive (keep a reference across any use). Only the
    /// first `filled` are meaningful.
    var buffer: UnsafeRawBufferPointer { UnsafeRawBufferPointer(storage) }

    /// A copy of the bytes as an array (tests).
    var bytes: [UInt8] { Array(buffer) }

    /// SHA-256 of the block's 4 MiB piece number `slot` (computed now if it was not yet); nil
    /// while the block is not whole.
    func pieceDigest(_ slot: Int) -> [UInt8]? {
        guard isWhole else { return nil }
        return digests.withLock { digests in
            if digests == nil { digests = Self.hashPieces(UnsafeRawBufferPointer(storage)) }
            return slot < digests!.count ? digests![slot] : nil
        }
    }

    /// Whether the digests are already there (tests).
    var hasDigests: Bool { digests.withLock { $0 != nil } }

    private static func hashPieces(_ bytes: UnsafeRawBufferPointer) -> [[UInt8]] {
        let piece = DropboxContentHasher.blockSize
        return stride(from: 0, to: bytes.count, by: piece).map { start in
            var digest = [UInt8](repeating: 0, count: Int(SHA256_DIGEST_LENGTH))
            _ = SHA256(bytes.baseAddress!.assumingMemoryBound(to: UInt8.self) + start, min(piece, bytes.count - start), &digest)
            return digest
        }
    }
}
