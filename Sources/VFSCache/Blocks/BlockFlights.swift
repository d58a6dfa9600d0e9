/// `BlockFlights`: the block downloads under way, one per key, which readers join instead of
/// downloading the same bytes again (single-flight). Unlike `SingleFlight`, a joiner need not
/// wait for the whole block: the fetch publishes its block as soon as the download reaches it,
/// and a reader waits only until the bytes it needs have arrived. So the first read of a cold
/// file gets its bytes after one round trip and those bytes, not after the whole 4 MiB block
/// (time to first byte), and a sequential reader that catches up with read-ahead takes each
/// piece as it lands. A joiner gives up at its deadline (the fetch itself goes on).
import Foundation

final class BlockFlights<Key: Hashable & Sendable>: @unchecked Sendable {
    // @unchecked: `fetches` is only touched with `lock` held.

    /// One download of one block (or fragment) and whoever waits for it.
    final class Fetch: @unchecked Sendable {
        // @unchecked: `block`, `outcome` and `waiters` are only touched with `condition` locked.
        let key: Key
        private let condition = NSCondition()
        /// Set when the download reaches this block (its memory is allocated then, not at claim
        /// time, so a span of blocks in flight holds one buffer, not four).
        private var block: CachedBlock?
        private var outcome: Result<CachedBlock, Errno>?
        private var waiters = 0

        fileprivate init(key: Key) { self.key = key }

        /// Bytes of the block in so far (0 until the download reaches it).
        var filled: Int {
            condition.lock(); defer { condition.unlock() }
            return block?.filled ?? 0
        }

        /// The download has reached this block: readers may take its bytes as they arrive.
        func begin(_ block: CachedBlock) {
            condition.lock()
            self.block = block
            if waiters > 0 { condition.broadcast() }
            condition.unlock()
        }

        /// More of the block has arrived (`CachedBlock.append` already moved `filled`).
        func progressed() {
            condition.lock()
            if waiters > 0 { condition.broadcast() }
            condition.unlock()
        }

        fileprivate func end(_ result: Result<CachedBlock, Errno>) {
            condition.lock()
            outcome = result
            condition.broadcast()
            condition.unlock()
        }

        /// Lets go of the finished block: a fetch stays referenced by the download that ran it
        /// until the whole span is in, so without this each background-fill thread held up to
        /// 16 MiB of blocks already on disk. Whoever still waits gets EAGAIN and reads the block
        /// from where it went (the disk cache).
        func dropBlock() {
            condition.lock()
            block = nil
            outcome = .failure(.again)
            condition.broadcast()
            condition.unlock()
        }

        /// The block once its first `prefix` bytes are in: possibly before the rest, possibly
        /// from a download that broke off later. Throws the fetch's error if it ended without
        /// them (EAGAIN: it gave the block up, fetch it yourself), ETIMEDOUT at `deadline`.
        func wait(forPrefix prefix: Int, until deadline: Date) throws(Errno) -> CachedBlock {
            condition.lock()
            defer { condition.unlock() }
            while true {
                if let block, block.filled >= prefix { return block }
                if let outcome {
                    let block = try outcome.get()
                    if block.filled >= prefix { return block }
                    throw .io
                }
                waiters += 1
                let woken: Bool
                if deadline == .distantFuture {
                    condition.wait()   // Foundation on Linux traps converting distantFuture to a timespec
                    woken = true
                } else {
                    woken = condition.wait(until: deadline)
                }
                waiters -= 1
                if !woken, outcome == nil, (block?.filled ?? 0) < prefix { throw .timedOut }
            }
        }
    }

    private let lock = NSLock()
    private var fetches: [Key: Fetch] = [:]

    /// Registers a fetch for `key` if none is under way (nil otherwise: background work must not
    /// park a thread behind another download). The claimer must `finish` it exactly once.
    func claim(_ key: Key) -> Fetch? {
        lock.lock(); defer { lock.unlock() }
        guard fetches[key] == nil else { return nil }
        let fetch = Fetch(key: key)
        fetches[key] = fetch
        return fetch
    }

    /// The fetch under way for `key`, or a new one this caller has claimed (`claimed` true).
    func joinOrClaim(_ key: Key) -> (fetch: Fetch, claimed: Bool) {
        lock.lock(); defer { lock.unlock() }
        if let fetch = fetches[key] { return (fetch, false) }
        let fetch = Fetch(key: key)
        fetches[key] = fetch
        return (fetch, true)
    }

    /// The fetch under way for `key`, if any.
    func existing(_ key: Key) -> Fetch? {
        lock.lock(); defer { lock.unlock() }
        return fetches[key]
    }

    func isRunning(_ key: Key) -> Bool { existing(key) != nil }

    /// Ends a claimed fetch: nobody joins it any more, and everyone waiting gets `result`.
    func finish(_ fetch: Fetch, _ result: Result<CachedBlock, Errno>) {
        lock.lock()
        if fetches[fetch.key] === fetch { fetches[fetch.key] = nil }
        lock.unlock()
        fetch.end(result)
    }
}
