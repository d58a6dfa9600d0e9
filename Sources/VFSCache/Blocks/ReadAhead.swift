/// `ReadAhead`: per-open-handle sequential-read detection. While reads follow each other, the
/// window of bytes fetched ahead of the reader starts at two blocks and doubles with every read,
/// up to a maximum; a seek resets it. The caller turns the returned byte range into parallel
/// block fetches, a span of blocks per download. Pure logic, no I/O.
struct ReadAhead {
    struct Policy {
        var blockSize: Int
        /// Sequential bytes read before read-ahead starts.
        var threshold: Int
        var maxWindow: Int
        /// Read-ahead downloads whole spans of this many bytes in one request (0 or `blockSize`:
        /// block by block). Once the window is at its largest, the range ends on a span boundary
        /// (or the file's end), so each span is asked for once, whole.
        var spanBytes: Int = 0
        var fileSize: UInt64 = .max
    }

    /// Where the next sequential read should start.
    private(set) var expectedOffset: UInt64 = 0
    /// Bytes read sequentially since the last seek.
    private(set) var sequentialBytes: UInt64 = 0
    /// Bytes fetched ahead of the reader (0: not reading ahead).
    private(set) var window: Int = 0
    /// Everything before this offset has already been asked for.
    private(set) var scheduledEnd: UInt64 = 0
    /// Whether the last read observed was a seek (for debug logging).
    private(set) var lastWasSeek = false

    /// Records a read of `length` bytes at `offset` and returns the byte range to fetch ahead,
    /// if any. A read after a seek never fetches ahead by itself. Reads count as sequential when they start within one block of where the last one
    /// ended (the kernel may deliver concurrent read-ahead requests slightly out of order).
    mutating func observe(offset: UInt64, length: Int, policy: Policy) -> Range<UInt64>? {
        let end = offset + UInt64(length)
        let slack = UInt64(policy.blockSize)
        let sequential = offset + slack >= expectedOffset && offset <= expectedOffset + slack
        lastWasSeek = !sequential
        if sequential {
            sequentialBytes += UInt64(length)
            expectedOffset = max(expectedOffset, end)
        } else {
            // A seek: start over, and wait for the next read to show a sequential run.
            sequentialBytes = UInt64(length)
            expectedOffset = end
            window = 0
            scheduledEnd = end
            return nil
        }
        guard sequentialBytes >= UInt64(policy.threshold), policy.maxWindow > 0 else { return nil }
        window = window == 0 ? min(2 * policy.blockSize, policy.maxWindow) : min(2 * window, policy.maxWindow)
        var target = end + UInt64(window)
        let start = max(scheduledEnd, end)
        if policy.spanBytes > policy.blockSize, target < policy.fileSize {
            let span = UInt64(policy.spanBytes)
            let aligned = target / span * span
            // While the window still grows, a partial span now beats waiting for a whole one.
            if aligned > start || window >= policy.maxWindow { target = aligned }
        }
        guard target > start else { return nil }
        scheduledEnd = target
        return start..<target
    }
}
