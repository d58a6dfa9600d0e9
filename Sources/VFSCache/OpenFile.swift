/// `OpenFile`: the state of one open file handle. It pins the revision the file had at open
/// (so every read of the handle sees one consistent version), and carries the handle's
/// read-ahead detector and content-hash check, behind the handle's own lock.
import Foundation

final class OpenFile: @unchecked Sendable {
    // @unchecked: the `let`s are immutable; `readAhead` and `verifier` only touched under `lock`.
    let ino: InodeNumber
    let path: String
    let fileID: String
    let rev: String
    let size: UInt64
    let contentHash: String?

    private let lock = NSLock()
    private var readAhead = ReadAhead()
    private var verifier: ContentVerifier?

    init(ino: InodeNumber, path: String, fileID: String, file: Node.FileMetadata, verify: Bool) {
        self.ino = ino
        self.path = path
        self.fileID = fileID
        rev = file.rev
        size = file.size
        contentHash = file.contentHash
        if verify, let hash = file.contentHash, file.size > 0 {
            verifier = ContentVerifier(expected: hash, size: file.size)
        }
    }

    func observe(offset: UInt64, length: Int, policy: ReadAhead.Policy) -> Range<UInt64>? {
        lock.lock(); defer { lock.unlock() }
        return readAhead.observe(offset: offset, length: length, policy: policy)
    }

    /// Feeds returned bytes to the content-hash check. Returns the computed hash once a full
    /// sequential read ends in a mismatch (the check then restarts, so a re-read is checked again).
    func verify(offset: UInt64, _ bytes: [UInt8]) -> String? {
        lock.lock(); defer { lock.unlock() }
        guard verifier != nil else { return nil }
        let outcome = bytes.withUnsafeBytes { verifier!.feed(offset: offset, $0) }
        switch outcome {
        case .pending:
            return nil
        case .matched, .abandoned:
            verifier = nil
            return nil
        case .mismatched(let actual):
            verifier = ContentVerifier(expected: contentHash ?? "", size: size)
            return actual
        }
    }

    func blockRequest(_ index: UInt64, blockSize: Int) -> BlockRequest {
        let start = index * UInt64(blockSize)
        let end = min(start + UInt64(blockSize), size)
        return BlockRequest(key: BlockKey(fileID: fileID, rev: rev, index: index), path: path, range: start..<end)
    }
}
