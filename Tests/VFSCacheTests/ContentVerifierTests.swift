/// `ContentVerifier` on its own: whole-file checks with reads in order, out of order (as FUSE
/// delivers the kernel's read-ahead), overlapping, and scattered.
import ContentHash
import Foundation
import Testing
@testable import VFSCache

@Suite struct ContentVerifierTests {
    private let piece = DropboxContentHasher.blockSize
    private var data: [UInt8] { testBytes(2 * DropboxContentHasher.blockSize + 12_345) }

    /// Feeds `chunks` (offset, length) of `data` to a piece-digest verifier.
    private func outcome(_ data: [UInt8], expected: String, _ chunks: [(Int, Int)]) -> ContentVerifier.Outcome {
        var verifier = ContentVerifier(expected: expected, size: UInt64(data.count), usesPieceDigests: true)
        var result = ContentVerifier.Outcome.pending
        for (offset, length) in chunks {
            let slice = Array(data[offset..<min(data.count, offset + length)])
            result = slice.withUnsafeBytes { bytes in
                verifier.feed(offset: UInt64(offset), bytes) { index in
                    let start = Int(index) * piece
                    return PieceSource(block: CachedBlock(copying: Array(data[start..<min(data.count, start + piece)])), slot: 0)
                }
            }
        }
        return result
    }

    private func chunks(of size: Int, by step: Int) -> [(Int, Int)] {
        stride(from: 0, to: size, by: step).map { ($0, step) }
    }

    @Test func inOrderOutOfOrderAndOverlappingReadsAllVerify() {
        let data = self.data
        let hash = DropboxContentHasher.hash(data)
        let ordered = chunks(of: data.count, by: 1 << 20)
        #expect(outcome(data, expected: hash, ordered) == .matched)
        // Pairs swapped, as concurrent kernel read-ahead requests complete.
        var swapped = ordered
        for index in stride(from: 0, to: swapped.count - 1, by: 2) { swapped.swapAt(index, index + 1) }
        #expect(outcome(data, expected: hash, swapped) == .matched)
        #expect(outcome(data, expected: hash, [(0, 3 << 20), (2 << 20, 20 << 20)]) == .matched)
        #expect(outcome(data, expected: String(repeating: "0", count: 64), ordered) == .mismatched(actual: hash))
    }

    @Test func scatteredReadsAbandonTheCheck() {
        let data = self.data
        let hash = DropboxContentHasher.hash(data)
        // Incomplete: pending, not a verdict.
        #expect(outcome(data, expected: hash, [(0, 1 << 20)]) == .pending)
        // A first read past the first piece is random access.
        #expect(outcome(data, expected: hash, [(piece, 100)]) == .abandoned)
        // So is a read far beyond the covered prefix.
        var far = ContentVerifier(expected: hash, size: 1 << 40, usesPieceDigests: true)
        let zeros = [UInt8](repeating: 0, count: 10)
        let source = PieceSource(block: CachedBlock(copying: [0]), slot: 0)
        _ = zeros.withUnsafeBytes { far.feed(offset: 0, $0) { _ in source } }
        let jumped = zeros.withUnsafeBytes { far.feed(offset: ContentVerifier.reorderWindow + 11, $0) { _ in source } }
        #expect(jumped == .abandoned)
        // The streaming mode (block sizes that are not multiples of 4 MiB) needs order.
        var streaming = ContentVerifier(expected: hash, size: UInt64(data.count), usesPieceDigests: false)
        let skipped = data[(1 << 20)..<(2 << 20)].withUnsafeBytes { streaming.feed(offset: 1 << 20, $0) { _ in nil } }
        #expect(skipped == .abandoned)
    }
}
