/// The staging budget (`--staging-budget`) as back-pressure on writers. A write through the daemon
/// waits while more written bytes wait for their upload than the budget allows, so a writer faster
/// than the upload is paced by it instead of filling the cache disk (xfstests' fsstress once left
/// 19.9 GB in the staging area against a 4 GiB budget). Like the kernel's own dirty-page limit, it
/// holds writers back and never stops one; it does not wait:
/// - for bytes no upload can send yet: a file still open for writing goes after its close (a file
///   written in order from byte 0 is streamed while written: its finished chunks do count), and a
///   file whose upload failed waits for a retry;
/// - while Dropbox is unreachable, uploads are paused by a rate limit, or the daemon stops;
/// - longer than `stallLimit` seconds without an upload byte moving: writes then go on past the
///   budget (up to the disk, then ENOSPC, docs/SEMANTICS.md) until the uploads move again.
/// Writers the kernel serves (passthrough) never reach the daemon; the budget keeps them from being
/// offered passthrough instead (`VFS.kernelWritable`).
import Foundation
import Synchronization

/// How the staging area stands (computed with the engine's lock held).
struct StagingLoad: Equatable {
    /// Written bytes Dropbox does not have yet: files being written (less the chunks a stream had
    /// confirmed), closes queued, under way or failing (whole, until their commit).
    var waiting: UInt64
    /// Of those, what the uploads will send without a close or a retry: closed files queued or under
    /// way, and the finished chunks of files streamed while written.
    var draining: UInt64
}

/// What the back-pressure remembers between writes. Lock-free: every write through the daemon asks.
final class StagingBackPressure: Sendable {
    /// Uptime (ns) before which writes do not look at the load again: a writer at 1 GB/s passes
    /// the budget by at most 10 MB before it waits.
    let nextLook = Atomic<UInt64>(0)
    static let lookInterval: UInt64 = 10_000_000
    /// The upload progress figure at which the uploads were found stalled; `.max` while not.
    let stalledAt = Atomic<UInt64>(.max)
    /// Chunk bytes Dropbox confirmed for streams of files still being written (`bytesSent` counts
    /// the uploads after close only).
    let streamedBytes = Atomic<UInt64>(0)
    /// Writes that waited (tests), and writes waiting now (`dbxfs status`).
    let waits = Atomic<UInt64>(0)
    let waitingNow = Atomic<Int>(0)
}

extension WriteBackEngine {
    /// Bytes that left for Dropbox, uploads and streams (only grows): what "the uploads move" means.
    var uploadProgress: UInt64 {
        bytesSent.load(ordering: .relaxed) &+ backPressure.streamedBytes.load(ordering: .relaxed)
    }

    /// The staging area's load (lock held).
    func stagingLoad() -> StagingLoad {
        var load = StagingLoad(waiting: 0, draining: 0)
        for dirty in files.values where dirty.writing || dirty.record != nil || dirty.closeFailure != nil {
            if dirty.writing {
                let size = (try? dirty.file.size()) ?? 0
                guard let stream = dirty.streaming, !stream.failed, !stream.handedOver,
                      !stream.cancelled.load(ordering: .relaxed) else {
                    load.waiting += size
                    continue
                }
                let confirmed = min(stream.confirmedBytes, size)
                load.waiting += size - confirmed
                let chunk = configuration.chunkSize
                let sendable = chunk == 0 ? 0 : stream.writtenPrefix / chunk * chunk
                if sendable > confirmed { load.draining += sendable - confirmed }
            } else {
                // Until its commit: what an upload reports as sent may still sit in socket buffers
                // (megabytes each on loopback), and the staging file stays until the commit.
                let size = dirty.record?.size ?? 0
                load.waiting += size
                if dirty.record != nil, dirty.hardError == nil, dirty.closeFailure == nil { load.draining += size }
            }
        }
        return load
    }

    /// Bytes closed or being written that Dropbox does not have yet (for the staging budget).
    public var bytesNotUploaded: UInt64 {
        condition.lock(); defer { condition.unlock() }
        return stagingLoad().waiting
    }

    /// Called by a write through the daemon before it writes, holding no lock: returns at once
    /// while the staging area is within `budget`, else waits as the top of this file says.
    public func waitForStagingRoom(budget: UInt64, stallLimit: Double) {
        let now = DispatchTime.now().uptimeNanoseconds
        guard now >= backPressure.nextLook.load(ordering: .relaxed) else { return }
        backPressure.nextLook.store(now + StagingBackPressure.lookInterval, ordering: .relaxed)
        let stalled = backPressure.stalledAt.load(ordering: .relaxed)
        if stalled != .max {
            guard uploadProgress != stalled else { return }
            backPressure.stalledAt.store(.max, ordering: .relaxed)
        }

        condition.lock(); defer { condition.unlock() }
        guard let first = loadToWaitFor(budget: budget) else { return }
        WriteBackLog.debug("a write waits for uploads: \(first.waiting) bytes written here are not on Dropbox yet, "
                           + "more than the staging budget of \(budget) bytes")
        backPressure.waitingNow.add(1, ordering: .relaxed)
        defer { backPressure.waitingNow.subtract(1, ordering: .relaxed) }
        var progress = uploadProgress
        var lastMove = Date()
        while loadToWaitFor(budget: budget) != nil {
            let current = uploadProgress
            if current != progress {
                progress = current
                lastMove = Date()
            } else if Date().timeIntervalSince(lastMove) >= stallLimit {
                backPressure.stalledAt.store(current, ordering: .relaxed)
                WriteBackLog.info("uploads sent nothing for \(Int(stallLimit.rounded(.up))) s; writes go on past the staging budget "
                                  + "of \(budget) bytes until they move again")
                break
            }
            _ = condition.wait(until: Date().addingTimeInterval(0.05))
        }
        backPressure.waits.add(1, ordering: .relaxed)
    }

    /// The load, if a writer must wait for it (lock held).
    private func loadToWaitFor(budget: UInt64) -> StagingLoad? {
        guard !stopped, waitersDeadline == .distantFuture, !offline, pausedUntil <= Date() else { return nil }
        let load = stagingLoad()
        return load.waiting > budget && load.draining > 0 ? load : nil
    }
}
