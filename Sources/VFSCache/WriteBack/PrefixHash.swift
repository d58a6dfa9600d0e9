/// The Dropbox content hash of a large file, computed while the file is still being written.
///
/// The content hash is SHA-256 over the SHA-256 digests of each 4 MiB block, so a block's digest
/// can be taken once the block is final. Alongside the streaming upload (StreamingUpload.swift),
/// the engine hashes every whole block of the prefix the facade reports as final
/// (`noteSequentialProgress`), on one background queue. At the commit, `prepare` hashes only the
/// tail after the last digested block, instead of re-reading the whole file: for 1 GiB that is
/// most of the time between close and commit.
///
/// Trust, but verify cheaply: every write and truncate of a staging file records the lowest offset
/// it touched (`StagingFile.takeLowestChange`). Before each round of reading and at the commit,
/// that offset is compared with the end of the digested blocks; anything below it (a rewrite the
/// facade did or did not report) throws the digests away and the whole file is hashed at commit.
/// So the commit always carries the hash of the bytes on disk at close, as before.
import ContentHash
import Foundation

/// Digests of the final blocks of one file. Only touched with the engine's lock held.
final class PrefixHash: @unchecked Sendable {
    // @unchecked: the vars are guarded by the owning engine's `condition`.
    /// SHA-256 of blocks 0..<digests.count.
    var digests: [[UInt8]] = []
    /// How far the writer has written contiguously (only whole blocks below it are hashed).
    var writtenPrefix: UInt64 = 0
    /// A hashing round is running on the hash queue.
    var hashing = false
    /// The bytes changed below the digests: never use them.
    var invalid = false

    var hashedBytes: UInt64 { UInt64(digests.count) * UInt64(DropboxChunkRules.blockSize) }
}

extension WriteBackEngine {
    /// Starts a hashing round if whole blocks are final and not yet hashed (lock held).
    func pumpHash(_ prefix: PrefixHash, file: StagingFile) {
        guard !prefix.hashing, !prefix.invalid, !stopped,
              prefix.writtenPrefix / UInt64(DropboxChunkRules.blockSize) > UInt64(prefix.digests.count) else { return }
        prefix.hashing = true
        hashQueue.async { self.hashRound(prefix, file: file) }
    }

    /// Hashes blocks until none is left to hash, checking before each block that nothing was
    /// written below the digests taken so far.
    private func hashRound(_ prefix: PrefixHash, file: StagingFile) {
        let block = UInt64(DropboxChunkRules.blockSize)
        condition.lock()
        defer { prefix.hashing = false; condition.broadcast(); condition.unlock() }
        while !prefix.invalid, !stopped, prefix.writtenPrefix / block > UInt64(prefix.digests.count) {
            if file.takeLowestChange() < prefix.hashedBytes { prefix.invalid = true; break }
            let offset = prefix.hashedBytes
            condition.unlock()
            let bytes = try? file.read(at: offset, count: Int(block))
            let digest = bytes.flatMap { $0.count == Int(block) ? sha256($0) : nil }
            condition.lock()
            guard let digest else { prefix.invalid = true; break }
            prefix.digests.append(digest)
        }
    }

    /// For `prepare`: the digests of `job`'s file taken while it was written, still valid for the
    /// bytes on disk, after waiting for a running round. Nil if there are none or they are stale.
    /// Used once: the digests belong to this close.
    func takePrefixDigests(_ job: UploadJob) -> [[UInt8]]? {
        condition.lock(); defer { condition.unlock() }
        guard let dirty = files[job.key], dirty.file === job.file, let prefix = dirty.prefixHash else { return nil }
        while prefix.hashing { condition.wait() }
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
