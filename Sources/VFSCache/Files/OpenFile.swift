/// `OpenFile`: the state of one open file handle. It pins the revision the file had at open
/// (so every read of the handle sees one consistent version, whatever other clients do), and
/// carries the handle's read-ahead detector and content-hash check, behind the handle's own lock.
/// Writes through this mount are not another client's: once a descriptor of the mount begins
/// changing the file, the handle reads the mount's bytes, as on a local disk (`localBytes`).
import Foundation
import Synchronization

final class OpenFile: @unchecked Sendable {
    // @unchecked: the `let`s are immutable; `readAhead`, `verifier` and `followed` only touched under `lock`.
    let ino: InodeNumber
    let path: String
    let fileID: String
    let rev: String
    let size: UInt64
    let contentHash: String?

    private let lock = NSLock()
    private var readAhead = ReadAhead()
    private var verifier: ContentVerifier?
    /// Blocks below this index were read through and dropped from memory by this handle's
    /// streaming reader (drop-behind, in `VFS.readPieces`). Read-ahead queued for them earlier,
    /// and run late, must neither download them again nor keep them (`BlockStore.prefetch`).
    private let droppedBelow = Atomic<UInt64>(0)

    private let usesPieceDigests: Bool

    /// The file's local record and its periods of changes when this handle opened (nil for the
    /// write side's readers of the server's bytes, which follow local writes themselves).
    let follows: (file: LocalFile, periodsAtOpen: UInt64)?

    init(ino: InodeNumber, path: String, fileID: String, file: Node.FileMetadata, verify: Bool, usesPieceDigests: Bool,
         follows: (file: LocalFile, periodsAtOpen: UInt64)? = nil) {
        self.follows = follows
        self.ino = ino
        self.path = path
        self.fileID = fileID
        rev = file.rev
        size = file.size
        contentHash = file.contentHash
        self.usesPieceDigests = usesPieceDigests
        if verify, let hash = file.contentHash, file.size > 0 {
            verifier = ContentVerifier(expected: hash, size: file.size, usesPieceDigests: usesPieceDigests)
        }
    }

    /// The staging file this handle last read the mount's bytes from. Kept (its descriptor keeps
    /// the bytes readable) for when the file lets it go: our version became a conflicted copy,
    /// or a restore replaced it. The handle read those bytes, so it goes on reading them rather
    /// than going back to the version it opened (docs/SEMANTICS.md, "Conflicts").
    private var followed: StagingFile?

    /// The mount's own bytes of the file, once a descriptor of the mount began changing it after
    /// this handle opened (they may since be committed: the staging file still holds them).
    func localBytes() -> StagingFile? {
        guard let (local, periodsAtOpen) = follows else { return nil }
        // Lock order: the handle's lock, then the file's (nothing takes them the other way).
        lock.lock(); defer { lock.unlock() }
        if let current = local.withLock({ local.writePeriods != periodsAtOpen ? local.staging : nil }) {
            followed = current
        }
        return followed
    }

    /// What a read tells about the handle's access pattern, and what to fetch for it.
    struct Observation {
        /// The byte range to fetch ahead after this read.
        var ahead: Range<UInt64>?
        /// Where a sequential read was expected, when this one is a seek.
        var seekFrom: UInt64?
        /// Whether the handle is streaming (reading ahead).
        var streaming: Bool
        /// Bytes read sequentially since the last seek, this read included.
        var sequentialBytes: UInt64
        /// Whether the content-hash check would take this read (it needs whole blocks).
        var checking: Bool
    }

    func observe(offset: UInt64, length: Int, policy: ReadAhead.Policy) -> Observation {
        lock.lock(); defer { lock.unlock() }
        let expected = readAhead.expectedOffset
        let ahead = readAhead.observe(offset: offset, length: length, policy: policy)
        // A seek starts a new run: what the old run dropped may be wanted again.
        if readAhead.lastWasSeek { droppedBelow.store(0, ordering: .sequentiallyConsistent) }
        return Observation(ahead: ahead, seekFrom: readAhead.lastWasSeek ? expected : nil, streaming: readAhead.window > 0,
                           sequentialBytes: readAhead.sequentialBytes, checking: verifier?.accepts(offset: offset) ?? false)
    }

    /// The streaming reader is done with every block below `index` (drop-behind). Recorded
    /// before the blocks leave memory, so read-ahead that puts one back sees it and takes it out.
    func dropBehind(below index: UInt64) {
        droppedBelow.raise(to: index)
    }

    /// Whether the streaming reader has already read and dropped block `index`.
    func hasDropped(_ index: UInt64) -> Bool { index < droppedBelow.load(ordering: .sequentiallyConsistent) }

    /// Feeds returned bytes to the content-hash check and returns its outcome (nil once the
    /// handle no longer checks). After a mismatch the check restarts, so a re-read is checked again.
    func verify(offset: UInt64, _ pieces: [UnsafeRawBufferPointer], pieceSource: (UInt64) -> PieceSource?) -> ContentVerifier.Outcome? {
        lock.lock(); defer { lock.unlock() }
        guard verifier != nil else { return nil }
        var outcome = ContentVerifier.Outcome.pending
        var at = offset
        for piece in pieces {
            outcome = verifier!.feed(offset: at, piece, pieceSource: pieceSource)
            at += UInt64(piece.count)
        }
        switch outcome {
        case .pending:
            break
        case .matched, .abandoned:
            verifier = nil
        case .mismatched:
            verifier = ContentVerifier(expected: contentHash ?? "", size: size, usesPieceDigests: usesPieceDigests)
        }
        return outcome
    }

    func blockRequest(_ index: UInt64, blockSize: Int) -> BlockRequest {
        let start = index * UInt64(blockSize)
        let end = min(start + UInt64(blockSize), size)
        return BlockRequest(key: BlockKey(fileID: fileID, rev: rev, index: index), path: path, range: start..<end)
    }
}
