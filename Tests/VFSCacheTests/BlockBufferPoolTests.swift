/// `BlockBufferPool`: freed block buffers are handed out again (same size only), and the pool
/// keeps no more than its cap; huge-page-sized buffers are aligned.
import Testing
@testable import VFSCache

@Suite struct BlockBufferPoolTests {
    @Test func reusesFreedBuffersOfTheSameSizeUpToItsCap() {
        let pool = BlockBufferPool(capBytes: 2 * 8192)
        let first = pool.take(byteCount: 8192)
        first.storeBytes(of: 0xAB, as: UInt8.self)
        pool.give(first)
        #expect(pool.pooledBytes == 8192)
        // Another size is mapped afresh; the same size gets the freed buffer back.
        let other = pool.take(byteCount: 4096)
        #expect(other.baseAddress != first.baseAddress)
        let again = pool.take(byteCount: 8192)
        #expect(again.baseAddress == first.baseAddress)
        #expect(pool.pooledBytes == 0)
        // Past the cap, buffers are unmapped instead of kept.
        let extra = [pool.take(byteCount: 8192), pool.take(byteCount: 8192)]
        pool.give(again)
        for buffer in extra { pool.give(buffer) }
        pool.give(other)
        #expect(pool.pooledBytes == 2 * 8192)
    }

    /// A prefilled pool hands out the buffers it mapped ahead of time, and prefills no further
    /// than its cap.
    @Test func prefilledBuffersAreHandedOutUpToTheCap() {
        let pool = BlockBufferPool(capBytes: 3 * (2 << 20))
        pool.prefill(count: 2, byteCount: 2 << 20)
        #expect(pool.pooledBytes == 2 * (2 << 20))
        pool.prefill(count: 5, byteCount: 2 << 20)
        #expect(pool.pooledBytes == 3 * (2 << 20))
        let taken = (0..<3).map { _ in pool.take(byteCount: 2 << 20) }
        #expect(pool.pooledBytes == 0)
        for buffer in taken {
            buffer.initializeMemory(as: UInt8.self, repeating: 1)
            #expect(buffer[(2 << 20) - 1] == 1)
            pool.give(buffer)
        }
    }

    /// Block sizes that are multiples of 2 MiB are mapped on a 2 MiB boundary (for huge pages),
    /// and every byte is usable.
    @Test func hugePageSizedBuffersAreAlignedAndWritable() {
        let pool = BlockBufferPool(capBytes: 0)
        for size in [2 << 20, 4 << 20] {
            let buffer = pool.take(byteCount: size)
            #expect(Int(bitPattern: buffer.baseAddress) % (2 << 20) == 0)
            #expect(buffer.count == size)
            buffer.initializeMemory(as: UInt8.self, repeating: 7)
            #expect(buffer[0] == 7 && buffer[size - 1] == 7)
            pool.give(buffer)
        }
        #expect(pool.pooledBytes == 0)
    }
}
