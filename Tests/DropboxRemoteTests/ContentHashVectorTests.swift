/// The content hash the client sends with uploads, against vectors computed independently with
/// Python's hashlib (4 MiB blocks, SHA-256 of the block digests): empty input, exactly one block,
/// one block plus one byte. The bytes are (i*7+3) mod 256.
import ContentHash
import Foundation
import Testing

@Suite struct ContentHashVectorTests {
    private func pattern(_ count: Int) -> [UInt8] { (0..<count).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) } }

    @Test func knownVectors() {
        #expect(DropboxContentHasher.hash([UInt8]()) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
        #expect(DropboxContentHasher.hash(pattern(4_194_304)) == "ed1a0dd53370ba832a2e98484b981bae55f9ad17cd0d1f88662e287d860f4855")
        #expect(DropboxContentHasher.hash(pattern(4_194_305)) == "d1d5c408dbdffb54d748df3f298a6059360b80669517ced004b55b64a8c23706")
    }

    @Test func slicingDoesNotMatter() {
        let bytes = pattern(4_194_305)
        var hasher = DropboxContentHasher()
        var offset = 0
        for size in [1, 4_194_302, 1, 1] {
            bytes[offset..<offset + size].withUnsafeBytes { hasher.update($0) }
            offset += size
        }
        #expect(hasher.finalize() == "d1d5c408dbdffb54d748df3f298a6059360b80669517ced004b55b64a8c23706")
    }
}
