/// `ContentVerifier`: checks a whole-file sequential read against Dropbox's `content_hash`.
/// It hashes the bytes a handle returns, in order, as long as reads continue where the hashed
/// prefix ends (overlaps are fine); a read that skips ahead stops the check for that handle.
/// When the hashed prefix reaches the file size, the digest must match.
import ContentHash

struct ContentVerifier: ~Copyable {
    enum Outcome: Equatable { case pending, matched, mismatched(actual: String), abandoned }

    let expected: String
    let size: UInt64
    private var hasher = DropboxContentHasher()
    private(set) var hashedUpTo: UInt64 = 0
    private(set) var outcome: Outcome = .pending

    init(expected: String, size: UInt64) {
        self.expected = expected
        self.size = size
    }

    /// Feeds the bytes a read returned for `offset`; returns the outcome so far.
    mutating func feed(offset: UInt64, _ bytes: UnsafeRawBufferPointer) -> Outcome {
        guard outcome == .pending else { return outcome }
        let end = offset + UInt64(bytes.count)
        guard offset <= hashedUpTo else { outcome = .abandoned; return outcome }
        if end > hashedUpTo {
            let skip = Int(hashedUpTo - offset)
            hasher.update(UnsafeRawBufferPointer(rebasing: bytes[skip...]))
            hashedUpTo = end
        }
        if hashedUpTo >= size {
            let actual = hasher.finalize()
            outcome = actual == expected ? .matched : .mismatched(actual: actual)
        }
        return outcome
    }
}
