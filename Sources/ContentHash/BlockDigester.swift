/// The first stage of Dropbox's content hash on its own: SHA-256 of each 4 MiB block, handed out
/// as each block completes (and, on demand, of the partial block so far). The write-back hashes a file while it is being written with it (the
/// bytes are in memory then, so the commit need not read them back), and `DropboxContentHasher`
/// is this plus the SHA-256 over the block digests.
import CCrypto

public final class BlockDigester {
    public static let blockSize = 4 * 1024 * 1024

    private let context: OpaquePointer
    /// Where `partialBlockDigest` finishes a copy of `context`.
    private let scratch: OpaquePointer
    private var bytesInBlock = 0
    /// Blocks completed so far (the index of the block being fed).
    public private(set) var completedBlocks = 0

    public init() {
        context = EVP_MD_CTX_new()!
        scratch = EVP_MD_CTX_new()!
        EVP_DigestInit_ex(context, EVP_sha256(), nil)
    }

    deinit {
        EVP_MD_CTX_free(context)
        EVP_MD_CTX_free(scratch)
    }

    /// Feeds the next bytes; returns the digests of the blocks they completed, in order.
    @discardableResult
    public func update(_ buffer: UnsafeRawBufferPointer) -> [[UInt8]] {
        guard var base = buffer.baseAddress else { return [] }
        var completed: [[UInt8]] = []
        var remaining = buffer.count
        while remaining > 0 {
            let take = min(remaining, Self.blockSize - bytesInBlock)
            EVP_DigestUpdate(context, base, take)
            bytesInBlock += take
            remaining -= take
            base += take
            if bytesInBlock == Self.blockSize { completed.append(closeBlock()) }
        }
        return completed
    }

    /// The digest of the partial last block, if any bytes were fed since the last whole block.
    /// Ends the stream: the digester starts over empty afterwards.
    public func finishPartialBlock() -> [UInt8]? {
        bytesInBlock > 0 ? closeBlock() : nil
    }

    /// The digest the partial last block would have if the stream ended here (nil on a block
    /// boundary). Feeding may go on: the running block is copied, not closed.
    public func partialBlockDigest() -> [UInt8]? {
        guard bytesInBlock > 0, EVP_MD_CTX_copy_ex(scratch, context) == 1 else { return nil }
        return Self.final(scratch)
    }

    private func closeBlock() -> [UInt8] {
        let digest = Self.final(context)
        EVP_DigestInit_ex(context, EVP_sha256(), nil)
        bytesInBlock = 0
        completedBlocks += 1
        return digest
    }

    private static func final(_ context: OpaquePointer) -> [UInt8] {
        var digest = [UInt8](repeating: 0, count: Int(EVP_MAX_MD_SIZE))
        var length: UInt32 = 0
        EVP_DigestFinal_ex(context, &digest, &length)
        return Array(digest.prefix(Int(length)))
    }
}
