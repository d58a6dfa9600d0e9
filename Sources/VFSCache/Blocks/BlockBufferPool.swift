/// `BlockBufferPool`: block-sized buffers kept for reuse after their blocks are freed, up to a
/// byte cap. A fresh mapping costs the kernel a page fault and a zeroed page for every 4 KiB of a
/// block (with MAP_POPULATE, up front): on a cold 1 GiB read that was ~8% of all CPU samples on
/// this 2-core machine, and the unmap of the evicted block another ~1.5%. In a streaming read the
/// memory cache is full, so every new block evicts an old one of the same size: its buffer goes
/// here and the next download writes straight into it, already mapped and resident.
///
/// Buffers are mapped memory, not malloc's (see `CachedBlock.allocateStorage`), so what the pool
/// does not keep goes back to the system at once; the cap bounds what it keeps.
import Synchronization
#if canImport(Glibc)
import Glibc
#endif

final class BlockBufferPool: Sendable {
    /// Free buffers by size, as (address, size) bit patterns so the pool is Sendable.
    private let free = Mutex<(bySize: [Int: [Int]], bytes: Int)>(([:], 0))
    let capBytes: Int

    init(capBytes: Int) { self.capBytes = capBytes }

    /// The pool every block uses. 64 MiB: sixteen 4 MiB blocks, more than a streaming read has in
    /// flight between an eviction and the next download.
    static let shared = BlockBufferPool(capBytes: 64 << 20)

    /// A buffer of exactly `byteCount` bytes with unspecified contents: reused if one is free,
    /// otherwise freshly mapped (and populated).
    func take(byteCount: Int) -> UnsafeMutableRawBufferPointer {
        guard byteCount > 0 else { return UnsafeMutableRawBufferPointer(start: nil, count: 0) }
        let reused: Int? = free.withLock { free in
            guard let address = free.bySize[byteCount]?.popLast() else { return nil }
            free.bytes -= byteCount
            return address
        }
        if let reused, let pointer = UnsafeMutableRawPointer(bitPattern: reused) {
            return UnsafeMutableRawBufferPointer(start: pointer, count: byteCount)
        }
        return Self.map(byteCount)
    }

    private static let hugePage = 2 << 20
    private static let madviseHugePage: Int32 = 14        // MADV_HUGEPAGE
    private static let madvisePopulateWrite: Int32 = 23   // MADV_POPULATE_WRITE (Linux 5.14)

    /// Fresh memory, populated. Sizes that are multiples of 2 MiB are placed on a 2 MiB boundary
    /// and asked for transparent huge pages: the kernel then pins and copies a 1 MiB FUSE reply
    /// from one page instead of 256, and populating takes 2 faults per 4 MiB instead of 1024.
    private static func map(_ byteCount: Int) -> UnsafeMutableRawBufferPointer {
        let huge = byteCount % hugePage == 0
        let span = huge ? byteCount + hugePage : byteCount
        let flags = MAP_PRIVATE | MAP_ANONYMOUS | (huge ? 0 : MAP_POPULATE)
        guard let raw = mmap(nil, span, PROT_READ | PROT_WRITE, flags, -1, 0), raw != MAP_FAILED else {
            fatalError("cannot map \(byteCount) bytes for a cache block: \(String(cString: strerror(errno)))")
        }
        guard huge else { return UnsafeMutableRawBufferPointer(start: raw, count: byteCount) }
        // Trim the mapping to the aligned range; the rest goes back at once.
        let start = Int(bitPattern: raw)
        let aligned = (start + hugePage - 1) / hugePage * hugePage
        if aligned > start { munmap(raw, aligned - start) }
        let end = aligned + byteCount
        if start + span > end { munmap(UnsafeMutableRawPointer(bitPattern: end)!, start + span - end) }
        let base = UnsafeMutableRawPointer(bitPattern: aligned)!
        _ = madvise(base, byteCount, madviseHugePage)
        if madvise(base, byteCount, madvisePopulateWrite) != 0 {
            // Older kernels: fault the pages in by hand, one write per 4 KiB.
            for offset in stride(from: 0, to: byteCount, by: 4096) { base.storeBytes(of: 0, toByteOffset: offset, as: UInt8.self) }
        }
        return UnsafeMutableRawBufferPointer(start: base, count: byteCount)
    }

    /// Takes the buffer back: kept for reuse while under the cap, else unmapped.
    func give(_ buffer: UnsafeMutableRawBufferPointer) {
        guard let base = buffer.baseAddress, buffer.count > 0 else { return }
        let kept = free.withLock { free in
            guard free.bytes + buffer.count <= capBytes else { return false }
            free.bySize[buffer.count, default: []].append(Int(bitPattern: base))
            free.bytes += buffer.count
            return true
        }
        if !kept { munmap(base, buffer.count) }
    }

    /// Maps and populates `count` buffers of `byteCount` bytes into the pool (as far as the cap
    /// allows), so the first downloads of a new mount find memory ready. A fresh buffer is the
    /// slowest step before a cold file's first byte: populating 4 MiB of huge pages took 0.5 ms,
    /// and 14.5 ms when the kernel compacted memory for them (a trace of the first read on a new
    /// mount: docs/BENCHMARKS.md, "Time to first byte at 0 ms"). Run it off any reader's path.
    func prefill(count: Int, byteCount: Int) {
        for _ in 0..<count {
            let room = free.withLock { $0.bytes + byteCount <= capBytes }
            guard room, byteCount > 0 else { return }
            give(Self.map(byteCount))
        }
    }

    /// Bytes held for reuse (tests).
    var pooledBytes: Int { free.withLock { $0.bytes } }
}
