/// The Dropbox content hash of a large file, computed while the file is still being written.
///
/// The content hash is SHA-256 over the SHA-256 digests of each 4 MiB block, so a block's digest
/// can be taken once the block is final. The facade hashes each sequential write's bytes on the
/// FUSE thread while they are still in memory (`LocalFile.extendSequence`, a `BlockDigester`) and
/// hands the digests of completed blocks to `noteSequentialProgress`. At the commit, `prepare`
/// hashes only the tail after the last digested block, instead of re-reading the whole file: for
/// 1 GiB that is most of the time between close and commit. (An earlier version read the blocks
/// back from the staging file on a background queue: one more pass over every byte.)
///
/// Trust, but verify cheaply: every write and truncate of a staging file records the lowest offset
/// it touched (`StagingFile.takeLowestChange`). At each report the only change since the previous
/// one must be the reported write at the old end, and at the commit nothing may have changed below
/// the digested blocks; anything else (a rewrite the facade did or did not report, digests out of
/// sequence) throws the digests away and the whole file is hashed at commit. So the commit always
/// carries the hash of the bytes on disk at close.
import ContentHash
import Foundation

/// Digests of block `firstIndex` onwards, completed by one write.
public struct CompletedBlocks: Sendable {
    public var firstIndex: Int
    public var digests: [[UInt8]]

    public init(firstIndex: Int, digests: [[UInt8]]) {
        self.firstIndex = firstIndex
        self.digests = digests
    }
}

/// Digests of the final blocks of one file. Only touched with the engine's lock held.
final class PrefixHash: @unchecked Sendable {
    // @unchecked: the vars are guarded by the owning engine's `condition`.
    /// SHA-256 of blocks 0..<digests.count.
    var digests: [[UInt8]] = []
    /// How far the writer has written contiguously (what the last report covered).
    var writtenPrefix: UInt64 = 0
    /// The bytes changed below the digests, or a report was out of sequence: never use them.
    var invalid = false

    var hashedBytes: UInt64 { UInt64(digests.count) * UInt64(DropboxChunkRules.blockSize) }
}

extension WriteBackEngine {
    /// Takes the digests of one sequential write that ended at `contiguousBytes` (lock held).
    func recordDigests(_ dirty: DirtyFile, contiguousBytes: UInt64, completed: CompletedBlocks) {
        // Every change since the last report must be this write, at the old end or beyond.
        let lowest = dirty.file.takeLowestChange()
        if dirty.prefixHash == nil {
            // A new sequence starts with a write at byte 0 and the facade's digests at block 0.
            guard completed.firstIndex == 0, lowest == 0 else { return }
            dirty.prefixHash = PrefixHash()
        }
        guard let prefix = dirty.prefixHash, !prefix.invalid else { return }
        guard lowest >= prefix.writtenPrefix, completed.firstIndex == prefix.digests.count else {
            prefix.invalid = true
            return
        }
        prefix.digests += completed.digests
        prefix.writtenPrefix = max(prefix.writtenPrefix, contiguousBytes)
    }

    /// For `prepare`: the digests of `job`'s file taken while it was written, still valid for the
    /// bytes on disk. Nil if there are none or they are stale.
    /// Used once: the digests belong to this close.
    func takePrefixDigests(_ job: UploadJob) -> [[UInt8]]? {
        condition.lock(); defer { condition.unlock() }
        guard let dirty = files[job.key], dirty.file === job.file, let prefix = dirty.prefixHash else { return nil }
        dirty.prefixHash = nil
        let usable = Int(min(UInt64(prefix.digests.count), job.record.size / UInt64(DropboxChunkRules.blockSize)))
        guard !prefix.invalid, usable > 0, job.file.takeLowestChange() >= prefix.hashedBytes else { return nil }
        return Array(prefix.digests.prefix(usable))
    }

    /// The content hash of bytes [0, `size`) of `file`, given the digests of its first blocks:
    /// only the rest is read. Adds what it reads to `bytesHashedAtCommit`.
    func contentHash(of file: StagingFile, size: UInt64, digestsOfFirstBlocks: [[UInt8]]) throws(Errno) -> String {
        let block = UInt64(DropboxChunkRules.blockSize)
        var digests = digestsOfFirstBlocks
        var offset = UInt64(digests.count) * block
        while offset < size {
            let want = Int(min(block, size - offset))
            let bytes = try file.read(at: offset, count: want)
            guard bytes.count == want else { throw Errno.io }  // shorter than the journal says
            digests.append(sha256(bytes))
            bytesHashedAtCommit.add(UInt64(want), ordering: .relaxed)
            offset += UInt64(want)
        }
        return hex(sha256(digests.joined()))
    }
}
