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

/// Digests of block `firstIndex` onwards, completed by one write, and of the partial block the
/// write ended in (nil when it ended on a block boundary).
public struct CompletedBlocks: Sendable {
    public var firstIndex: Int
    public var digests: [[UInt8]]
    public var tailDigest: [UInt8]?

    public init(firstIndex: Int, digests: [[UInt8]], tailDigest: [UInt8]? = nil) {
        self.firstIndex = firstIndex
        self.digests = digests
        self.tailDigest = tailDigest
    }
}

/// Digests of the final blocks of one file. Only touched with the engine's lock held.
final class PrefixHash: @unchecked Sendable {
    // @unchecked: the vars are guarded by the owning engine's `condition`.
    /// SHA-256 of blocks 0..<digests.count.
    var digests: [[UInt8]] = []
    /// How far the writer has written contiguously (what the last report covered).
    var writtenPrefix: UInt64 = 0
    /// SHA-256 of the bytes after the last whole block, up to `writtenPrefix` (nil: none).
    var tailDigest: [UInt8]?
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
        prefix.tailDigest = completed.tailDigest
    }

    /// For `prepare`: the digests of `job`'s file taken while it was written, still valid for the
    /// bytes on disk: those of its first whole blocks and, when the writer reported every byte up
    /// to the journaled size and nothing changed since, that of the partial last block too, so
    /// nothing is left to read. Nil if there are none or they are stale (also while the file is
    /// being written again: they would not belong to this close). Used once.
    func takePrefixDigests(_ job: UploadJob) -> [[UInt8]]? {
        condition.lock(); defer { condition.unlock() }
        guard let dirty = files[job.key], dirty.file === job.file, !dirty.writing, let prefix = dirty.prefixHash else { return nil }
        dirty.prefixHash = nil
        let size = job.record.size
        let wholeBlocks = Int(size / UInt64(DropboxChunkRules.blockSize))
        let lowestChange = job.file.takeLowestChange()
        guard !prefix.invalid, lowestChange >= prefix.hashedBytes else { return nil }
        var digests = Array(prefix.digests.prefix(wholeBlocks))
        if lowestChange == .max, prefix.writtenPrefix == size, prefix.digests.count == wholeBlocks,
           let tail = prefix.tailDigest {
            digests.append(tail)
        }
        return digests.isEmpty ? nil : digests
    }

    /// The content hash of bytes [0, `size`) of `file`, given the digests of its first blocks
    /// (the last one may be the partial last block's): only the rest is read. Adds what it reads
    /// to `bytesHashedAtCommit`.
    func contentHash(of file: StagingFile, size: UInt64, digestsOfFirstBlocks: [[UInt8]]) throws(Errno) -> String {
        Self.contentHash(ofBlocks: try blockDigests(of: file, size: size, digestsOfFirstBlocks: digestsOfFirstBlocks))
    }

    /// The digests of every 4 MiB block of bytes [0, `size`) of `file` (see `contentHash(of:)`).
    func blockDigests(of file: StagingFile, size: UInt64, digestsOfFirstBlocks: [[UInt8]]) throws(Errno) -> [[UInt8]] {
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
        return digests
    }

    /// Dropbox's content hash from the digests of a file's blocks.
    static func contentHash(ofBlocks digests: [[UInt8]]) -> String { hex(sha256(digests.joined())) }
}
