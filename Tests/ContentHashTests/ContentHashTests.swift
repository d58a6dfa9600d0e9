/// Known-answer tests for Dropbox's content hash, at the block boundaries where it can go wrong.
import ContentHash
import Foundation
import Testing

@Suite struct ContentHashTests {
    @Test func emptyInputHashesToSHA256OfNothing() {
        // Zero blocks: SHA-256 over an empty concatenation.
        #expect(DropboxContentHasher.hash([UInt8]()) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    }

    @Test func exactlyOneBlockIsHashOfBlockDigest() {
        let block = [UInt8](repeating: 0x61, count: DropboxContentHasher.blockSize)
        #expect(DropboxContentHasher.hash(block) == hex(sha256(sha256(block))))
    }

    @Test func oneBlockPlusOneByteHasTwoBlockDigests() {
        var data = [UInt8](repeating: 0x61, count: DropboxContentHasher.blockSize)
        data.append(0x62)
        let expected = hex(sha256(sha256(data.prefix(DropboxContentHasher.blockSize)) + sha256([0x62])))
        #expect(DropboxContentHasher.hash(data) == expected)
    }

    @Test func slicingDoesNotChangeTheHash() {
        let data = (0..<(9 * 1024 * 1024 + 17)).map { UInt8(truncatingIfNeeded: $0 &* 31) }
        var hasher = DropboxContentHasher()
        var index = 0
        var step = 1
        while index < data.count {
            let end = min(data.count, index + step)
            data[index..<end].withUnsafeBytes { hasher.update($0) }
            index = end
            step = step * 3 + 1
        }
        #expect(hasher.finalize() == DropboxContentHasher.hash(data))
    }

    @Test func shortInputIsHashOfItsOnlyBlockDigest() {
        // One block: SHA-256 of the SHA-256 of the input. The expected value was computed
        // independently with Python: sha256(sha256(d).digest()).hexdigest().
        let data = Array("The quick brown fox jumps over the lazy dog".utf8)
        #expect(DropboxContentHasher.hash(data) == "6d37795021e544d82b41850edf7aabab9a0ebe274e54a519840c4666f35b3937")
    }

    @Test func fileHashMatchesInMemoryHash() throws {
        let data = (0..<(4 * 1024 * 1024 + 5)).map { UInt8(truncatingIfNeeded: $0) }
        let url = FileManager.default.temporaryDirectory.appendingPathComponent("dbxfs-hash-\(getpid())")
        try Data(data).write(to: url)
        defer { try? FileManager.default.removeItem(at: url) }
        #expect(try DropboxContentHasher.hash(fileAt: url) == DropboxContentHasher.hash(data))
        #expect(try DropboxContentHasher.hash(fileAt: url, length: 3) == DropboxContentHasher.hash(data.prefix(3)))
    }

    @Test func randomStringsUseTheAlphabet() {
        let s = SecureRandom.string(count: 128)
        #expect(s.count == 128)
        #expect(s.allSatisfy { $0.isLetter || $0.isNumber })
        #expect(SecureRandom.string(count: 32) != SecureRandom.string(count: 32))
    }
}
