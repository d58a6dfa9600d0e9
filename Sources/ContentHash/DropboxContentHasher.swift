/// Dropbox's content hash, computed as a stream: SHA-256 of each 4 MiB block, then SHA-256 of the
/// concatenated block digests, as 64 lowercase hex characters. Both the client (to tag uploads)
/// and the cache (to check commits and whole-file reads) use it. Data is fed in any slicing; only
/// one block digest context is alive at a time, so a file of any size is hashed in constant memory.
import CCrypto
import Foundation

public struct DropboxContentHasher: ~Copyable {
    public static let blockSize = BlockDigester.blockSize

    private let blocks = BlockDigester()
    private let overallContext: OpaquePointer
    private var finished = false

    public init() {
        overallContext = EVP_MD_CTX_new()!
        EVP_DigestInit_ex(overallContext, EVP_sha256(), nil)
    }

    deinit {
        EVP_MD_CTX_free(overallContext)
    }

    public mutating func update(_ buffer: UnsafeRawBufferPointer) {
        precondition(!finished, "DropboxContentHasher used after finalize()")
        for digest in blocks.update(buffer) { EVP_DigestUpdate(overallContext, digest, digest.count) }
    }

    public mutating func update(_ bytes: some Sequence<UInt8>) {
        let array = Array(bytes)
        array.withUnsafeBytes { update($0) }
    }

    /// The hash as lowercase hex. The hasher cannot be fed afterwards.
    public mutating func finalize() -> String {
        precondition(!finished, "DropboxContentHasher finalized twice")
        if let last = blocks.finishPartialBlock() { EVP_DigestUpdate(overallContext, last, last.count) }
        finished = true
        var digest = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        EVP_DigestFinal_ex(overallContext, &digest, &length)
        return hex(digest.prefix(Int(length)))
    }

    /// Hash of an in-memory buffer.
    public static func hash(_ bytes: some Sequence<UInt8>) -> String {
        var hasher = DropboxContentHasher()
        hasher.update(bytes)
        return hasher.finalize()
    }

    /// Hash of bytes [0, length) of a file (the whole file when length is nil), read in 1 MiB pieces.
    public static func hash(fileAt url: URL, length: UInt64? = nil) throws -> String {
        let handle = try FileHandle(forReadingFrom: url)
        defer { try? handle.close() }
        var hasher = DropboxContentHasher()
        var remaining = length ?? UInt64.max
        while remaining > 0 {
            let want = Int(min(remaining, 1 << 20))
            guard let chunk = try handle.read(upToCount: want), !chunk.isEmpty else { break }
            chunk.withUnsafeBytes { hasher.update($0) }
            remaining -= UInt64(chunk.count)
        }
        return hasher.finalize()
    }
}

/// Plain SHA-256, for PKCE challenges and tests.
public func sha256(_ bytes: some Sequence<UInt8>) -> [UInt8] {
    let array = Array(bytes)
    var digest = [UInt8](repeating: 0, count: Int(SHA256_DIGEST_LENGTH))
    array.withUnsafeBytes { buffer in
        _ = SHA256(buffer.baseAddress?.assumingMemoryBound(to: UInt8.self), buffer.count, &digest)
    }
    return digest
}

/// Lowercase hex of bytes.
public func hex(_ bytes: some Sequence<UInt8>) -> String {
    let digits = Array("0123456789abcdef".utf8)
    var out = [UInt8]()
    for byte in bytes { out.append(digits[Int(byte >> 4)]); out.append(digits[Int(byte & 0xf)]) }
    return String(decoding: out, as: UTF8.self)
}
